"""Support code of ``benchmarks/hollow_agents.py``: the hollow agents, the API prober, figures."""
