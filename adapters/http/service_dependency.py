"""The service a request is served by, as a FastAPI dependency.

Both APIs' routes are built once per process (`team_api.team_routes`,
`management_api.management_routes`) and shared by every app made from them: FastAPI
builds a validator per parameter and response of each route, ~75 ms for the team API,
which a process serving one service paid once but an embedding app or a test that makes
a service per tenant or per test paid for each. So a route does not close over a service:
it asks for the one its app was made for, which `create_team_api` and
`create_management_api` keep in the app's state."""

from typing import Annotated

from fastapi import Depends, Request
from healthledger.adapters.composition import Service
from healthledger.adapters.http.cursors import CursorCodec


async def current_service(request: Request) -> Service:
    # Async: a sync dependency runs on the thread pool, and a hop there and back costs more
    # than reading the app's state (every route asks for it).
    service: Service = request.app.state.service
    return service


def current_cursors(service: "CurrentService") -> CursorCodec:
    """The paging cursors' codec, keyed by the service's cursor secret."""
    return CursorCodec(service.cursor_secret)


CurrentService = Annotated[Service, Depends(current_service)]
Cursors = Annotated[CursorCodec, Depends(current_cursors)]
