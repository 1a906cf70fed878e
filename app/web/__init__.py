"""FastAPI routers: pages and their JSON twins."""
