"""The REST face: the app (`app.py`), one router per resource (`routes/`), request bodies and
examples (`schemas.py`), how a route calls the engine (`calls.py`)."""
