"""SQLAlchemy models and sessions; migrations/ (Alembic) owns the schema."""
