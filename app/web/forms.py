"""One route, two bodies: scripts send JSON, pages send forms (htmx included). Both come
out as one validated pydantic model, or a 422 naming the field."""

from __future__ import annotations

from typing import TypeVar

import orjson
from fastapi import HTTPException, Request
from pydantic import BaseModel, ValidationError

M = TypeVar("M", bound=BaseModel)
MAX_BODY_BYTES = 256 * 1024


async def parse(request: Request, model: type[M]) -> M:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.form(max_files=0, max_fields=200)
        raw: object = {k: (v if len(form.getlist(k)) == 1 else form.getlist(k)) for k, v in form.items()}
    else:
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            raise HTTPException(413, f"the body is over {MAX_BODY_BYTES // 1024} KiB")
        try:
            raw = orjson.loads(body) if body.strip() else {}
        except orjson.JSONDecodeError as e:
            raise HTTPException(400, f"the body is not JSON: {e}") from None
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first.get("loc", ())) or "body"
        raise HTTPException(422, f"{where}: {first.get('msg', 'invalid')}") from None


def wants_fragment(request: Request) -> bool:
    """An htmx request swaps the answer into the page: it gets the fragment, not JSON."""
    return request.headers.get("hx-request") == "true"
