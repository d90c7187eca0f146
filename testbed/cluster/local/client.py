"""A LocalCluster's HTTP connection to its replica processes: readiness polls and health reports
(GET /healthz) and the token-guarded reconfiguration (POST /_config)."""

from __future__ import annotations

import asyncio

import aiohttp

# What a replica that is not (or no longer) answering raises; callers treat it as "not now".
# asyncio.TimeoutError is not the builtin TimeoutError before Python 3.11.
UNREACHABLE = (aiohttp.ClientError, TimeoutError, asyncio.TimeoutError)


class ReplicaClient:
    """`async with ReplicaClient(token):` one HTTP session (2 s per request) to every replica;
    `aclose` is safe twice. `token` is the replicas' /_config secret."""

    timeout_s = 2.0

    def __init__(self, token: str) -> None:
        self._token = token
        self.session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> ReplicaClient:
        self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def open(self) -> None:
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))

    async def aclose(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None

    @property
    def is_open(self) -> bool:
        return self.session is not None

    async def ready_in(self, url: str) -> float | None:
        """How long until the replica at `url` is ready, by its /healthz: 0 when it answers 200,
        the seconds it says while it starts, None while it cannot answer (or says nothing)."""
        assert self.session is not None
        try:
            async with self.session.get(url + "/healthz") as resp:
                if resp.status == 200:
                    return 0.0
                doc = await resp.json(content_type=None)
        except (*UNREACHABLE, ValueError):
            return None
        wait = doc.get("ready_in_s") if isinstance(doc, dict) else None
        return float(wait) if isinstance(wait, int | float) and wait >= 0 else None

    async def health(self, url: str) -> dict:
        """The replica's /healthz document; raises UNREACHABLE's errors or ValueError."""
        assert self.session is not None
        async with self.session.get(url + "/healthz") as resp:
            return await resp.json(content_type=None)

    async def set_config(self, url: str, batch: int, stretch: float) -> None:
        """Tell the replica its batch size and stretch; RuntimeError if it refuses."""
        assert self.session is not None
        body = {"batch": batch, "stretch": stretch}
        async with self.session.post(url + "/_config", json=body,
                                     headers={"Authorization": f"Bearer {self._token}"}) as resp:
            await resp.read()
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}")
