"""The route table: static paths and patterns with parameters, per-route body limits, and the
404 / 405 (with `allow`) for everything the table does not take."""

from __future__ import annotations

import pytest

from levergate.config import ServerSettings
from levergate.config.server import MULTIPART_OVERHEAD_BYTES
from levergate.errors import MethodNotAllowed, NotFound
from levergate.server.edge import Edge
from levergate.server.exchange import Request, Response
from levergate.server.route import Route
from levergate.server.routes import ROUTES, Router


async def nothing(_edge: Edge, _request: Request) -> Response:
    return Response(204)


TABLE = (
    Route("POST", "/v1/chat/completions", nothing),
    Route("GET", "/v1/files/{id}", nothing),
    Route("DELETE", "/v1/files/{id}", nothing),
    Route("POST", "/v1/files", nothing, stream=True),
    Route("POST", "/v1/batches/{id}/cancel", nothing, max_body_bytes=4096),
    Route("GET", "/v1/models/{model:path}", nothing),
)
SERVER = ServerSettings(max_body_bytes=2048, max_upload_bytes=10_000)


def test_static_paths_and_parameters_match() -> None:
    router = Router(TABLE, settings=SERVER)
    bound, params = router.match("POST", "/v1/chat/completions")
    assert bound.route.path == "/v1/chat/completions"
    assert params == {}
    bound, params = router.match("POST", "/v1/batches/batch_42/cancel")
    assert bound.route.path == "/v1/batches/{id}/cancel"
    assert params == {"id": "batch_42"}
    assert router.match("DELETE", "/v1/files/f-1")[1] == {"id": "f-1"}
    # A `:path` parameter takes the rest of the path, slashes included (model ids).
    assert router.match("GET", "/v1/models/org/model-7b")[1] == {"model": "org/model-7b"}


@pytest.mark.parametrize(
    "path",
    ["/v1/nope", "/v1/batches//cancel", "/v1/batches/a/b/cancel", "/v1/files/", "/v1/models/"],
)
def test_a_path_no_route_knows_is_a_404(path: str) -> None:
    with pytest.raises(NotFound) as caught:
        Router(TABLE, settings=SERVER).match("POST", path)
    assert caught.value.code == "unknown_url"


def test_a_known_path_with_another_method_is_a_405_that_lists_the_allowed_ones() -> None:
    router = Router(TABLE, settings=SERVER)
    with pytest.raises(MethodNotAllowed) as caught:
        router.match("GET", "/v1/chat/completions")
    assert caught.value.headers()["allow"] == "POST"
    with pytest.raises(MethodNotAllowed) as caught:
        router.match("PUT", "/v1/files/f-1")
    assert caught.value.headers()["allow"] == "DELETE, GET, HEAD"
    assert caught.value.status == 405


def test_head_is_allowed_wherever_get_is() -> None:
    router = Router(TABLE, settings=SERVER)
    assert router.match("HEAD", "/v1/files/f-1")[0].route.method == "GET"
    with pytest.raises(MethodNotAllowed):
        router.match("HEAD", "/v1/chat/completions")


def test_body_limits_are_per_route_with_defaults_from_the_settings() -> None:
    router = Router(TABLE, settings=SERVER)
    assert router.match("POST", "/v1/chat/completions")[0].limit == 2048
    assert router.match("POST", "/v1/files")[0].limit == 10_000 + MULTIPART_OVERHEAD_BYTES
    assert router.match("POST", "/v1/batches/b/cancel")[0].limit == 4096


def test_two_routes_for_the_same_method_and_path_are_refused() -> None:
    with pytest.raises(ValueError, match="two routes"):
        Router((*TABLE, Route("POST", "/v1/files", nothing)), settings=SERVER)


def test_the_shipped_table_builds_and_serves_the_openai_paths() -> None:
    router = Router(ROUTES, settings=ServerSettings())
    for method, path in [
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("POST", "/v1/embeddings"),
        ("GET", "/v1/models"),
        ("GET", "/v1/models/gpt-4o-mini"),
        ("HEAD", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/metrics"),
    ]:
        assert router.match(method, path)[0].route.method in {method, "GET"}
