"""The master instance's boot script (`master-boot.sh.tmpl`), rendered by `render.py`."""
