"""The web UI the master hosts: server-rendered pages (Jinja2), htmx for live fragments and
actions, uPlot for charts; every asset is served by the master (``static/``, ``static/vendor/``
copied from npm by ``scripts/webui_assets.sh``), so it works with no internet.

- ``session``: sign-in by a session cookie (HttpOnly, SameSite=Strict) holding a user token,
  and the CSRF token every state-changing request made with that cookie must carry.
- ``render``: the Jinja2 environment, loaded on first use (the API alone never imports it), and
  ``page()``, which renders a whole page or, for an htmx poll, only its ``live`` block.
- ``pages/``: one module per page. Pages read through the services; actions call the REST API
  itself from the browser (``static/app.js``), so roles, limits and messages are the API's own.
"""
