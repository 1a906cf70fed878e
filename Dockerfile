# Trace Dojo on the embedded default (SQLite in /app/data); set DATABASE_URL for PostgreSQL.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md alembic.ini ./
COPY app app
COPY scenarios scenarios
COPY templates templates
COPY static static
COPY migrations migrations
RUN pip install --no-cache-dir .
# The package is installed, but templates, static files and migrations are read from /app.
ENV PYTHONPATH=/app
EXPOSE 8000
CMD ["tracedojo", "serve", "--host", "0.0.0.0", "--port", "8000"]
