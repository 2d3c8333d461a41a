"""The management API application ({management_url}): its own port and OpenAPI."""

from __future__ import annotations

import functools

from fastapi import APIRouter, FastAPI
from fastapi_offline import FastAPIOffline
from healthledger.adapters.composition import Service
from healthledger.adapters.http import event_destinations, management, webhook_endpoints
from healthledger.adapters.http.errors import install_error_handlers
from healthledger.adapters.http.requests import (
    BodyLimitMiddleware,
    DeprecatedHeaderMiddleware,
    RequestIdMiddleware,
)
from starlette.routing import BaseRoute

MANAGEMENT_ROUTERS: tuple[APIRouter, ...] = (
    management.router,
    webhook_endpoints.router,
    event_destinations.router,
)


@functools.cache
def management_routes() -> tuple[BaseRoute, ...]:
    """Every route of the management API, built once per process (as `team_routes`)."""
    routes = APIRouter()
    for router in MANAGEMENT_ROUTERS:
        routes.include_router(router)
    return tuple(routes.routes)


def create_management_api(service: Service) -> FastAPI:
    # FastAPIOffline: FastAPI whose /docs and /redoc pages load Swagger UI and ReDoc from
    # files in the package, not from a CDN (blank pages without internet otherwise).
    app = FastAPIOffline(
        title="healthledger management API",
        version="1",
        description="Organizations, teams, management keys, team API keys, webhook "
        "endpoints and event destinations. Authenticate "
        "with the `X-Management-Key` header (`X-Service-Org-Key` is its deprecated name). "
        "Text fields refuse control characters (Unicode category C) with a 422; a webhook "
        "description and a brand's company_address may span lines.",
        routes=list(management_routes()),
    )
    app.state.service = service
    install_error_handlers(app)
    app.add_middleware(DeprecatedHeaderMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_bytes=service.settings.max_body_bytes)
    app.add_middleware(RequestIdMiddleware)
    return app
