"""Fixtures shared by the models' tests."""

from __future__ import annotations

import pytest_asyncio

from limpyd_blueque import aio


@pytest_asyncio.fixture
async def client(redis_url, conn):
    """An asyncio client of the tests' server (`aio.connect`), closed after the test."""
    client = aio.connect(redis_url)
    yield client
    await (getattr(client, "aclose", None) or client.close)()
