# Image of the Broker Ledger service (API and, later, projection workers).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY domain domain
COPY application application
COPY interface interface
COPY projections projections
COPY settings settings
# the API guide: the API document's examples are read from it (interface/api_document/examples.py)
COPY docs/api.md docs/api.md
# the analysts' guide: the read schema's comments are read from it (projections/comments.py)
COPY docs/analytics.md docs/analytics.md
RUN pip install --no-cache-dir -e . && useradd --system --home /app ledger && mkdir -p /var/lib/broker-ledger \
    && chown ledger /var/lib/broker-ledger
USER ledger
ENV BROKER_LEDGER_VAR=/var/lib/broker-ledger \
    BROKER_LEDGER_SETTINGS=/app/settings/demo.toml
EXPOSE 8000
CMD ["broker-ledger", "serve", "--host", "0.0.0.0", "--port", "8000", "--workers", "4"]
