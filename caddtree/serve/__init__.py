"""The OpenAI-compatible server (`caddtree serve`): text.py (stop strings), worker.py (the decode thread and its
queue), schemas.py (requests), app.py (the HTTP API)."""
