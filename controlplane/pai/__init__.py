"""OpenPAI's v1 job protocol: the job JSON (`spec`), port reservation (`ports`), the `PAI_*`
environment (`env`) and the frameworklauncher's completion and retry policy (`completion`).

Pure code: no I/O, no master imports. Sources are cited in each module's docstring.
"""
