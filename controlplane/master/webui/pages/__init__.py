"""One module per page of the web UI; ``webui.routes`` lists their handlers."""
