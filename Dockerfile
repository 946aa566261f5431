# Prima service image: slim Python, pinned dependencies, non-root, data dir as a volume.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PRIMA_DATA_DIR=/data
WORKDIR /app

# Optional extras, e.g. --build-arg PRIMA_EXTRAS=s3 (cubes in an object store) or spark,s3.
ARG PRIMA_EXTRAS=""
COPY requirements*.lock ./
RUN pip install --no-cache-dir -r requirements.lock \
 && for extra in $(echo "$PRIMA_EXTRAS" | tr ',' ' '); do pip install --no-cache-dir -r "requirements-$extra.lock"; done

COPY pyproject.toml README.md ./
COPY app ./app
COPY engine ./engine
COPY privacy ./privacy
COPY storage ./storage
RUN pip install --no-cache-dir --no-deps . \
 && useradd --system --uid 10001 --home /data prima \
 && mkdir -p /data /cubes && chown prima /data /cubes

USER prima
VOLUME ["/data"]
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=3s --start-period=20s \
  CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=2)"
CMD ["prima", "serve", "--host", "0.0.0.0", "--port", "8000", "--data-dir", "/data"]
