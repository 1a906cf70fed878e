"""The Jinja environment every router renders with (templates/ is named after the routes)."""

from fastapi.templating import Jinja2Templates

from app.config import ROOT

templates = Jinja2Templates(directory=str(ROOT / "templates"))
