"""Authentication, tenant isolation, admin-only changes, the audit log and submit rate limits,
over real sockets against a server that requires tokens (no --insecure-dev)."""

import asyncio
import base64
import json
import os
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import duration_pb2, field_mask_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from sqlalchemy import select
from sqlalchemy.engine import URL

from federation.security.auth import TOKEN
from federation.server.app import FederationServer
from federation.store.models import ApiToken, Job
from federation.store.tokens import TokenStore
from federation.v1 import admin_pb2, admin_pb2_grpc, common_pb2, jobs_pb2, jobs_pb2_grpc
from tests.processes import BIN, ServerProcess


@dataclass
class Caller:
    jobs: jobs_pb2_grpc.JobServiceStub
    admin: admin_pb2_grpc.AdminServiceStub


@dataclass
class Secure:
    server: FederationServer
    address: str
    channel: grpc.aio.Channel
    root: Caller  # an admin token made with the bootstrap path (federation-server token create)

    def as_(self, token: str | None) -> Caller:
        """Stubs that send `token` (or nothing) on every call."""
        metadata = (("authorization", f"Bearer {token}"),) if token is not None else None

        class Stub:
            def __init__(self, stub: Any) -> None:
                self.stub = stub

            def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
                method = getattr(self.stub, name)
                return lambda request, **kw: method(request, metadata=metadata, **kw)

        return Caller(Stub(jobs_pb2_grpc.JobServiceStub(self.channel)),  # type: ignore[arg-type]
                      Stub(admin_pb2_grpc.AdminServiceStub(self.channel)))  # type: ignore[arg-type]

    async def token(self, tenant: str | None = None, admin: bool = False, ttl: float | None = None) -> str:
        response = await self.root.admin.CreateToken(admin_pb2.CreateTokenRequest(
            tenant=tenant or "", admin=admin, ttl=duration_pb2.Duration(seconds=int(ttl)) if ttl else None))
        return response.bearer_token


async def secure_server(db_url: URL, **kw: Any) -> tuple[FederationServer, str]:
    server = FederationServer(db_url, "127.0.0.1:0", **kw)
    port = await server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
async def secure(db_url: URL) -> AsyncIterator[Secure]:
    server, address = await secure_server(db_url)
    _, bearer = await TokenStore(server.engine).create("test bootstrap", "root", None, True, None)
    async with grpc.aio.insecure_channel(address) as channel:
        fed = Secure(server, address, channel, Caller(jobs_pb2_grpc.JobServiceStub(channel),
                                                      admin_pb2_grpc.AdminServiceStub(channel)))
        fed.root = fed.as_(bearer)
        yield fed
    await server.stop(grace=0)


def spec(name: str, queue: str) -> common_pb2.JobSpec:
    return common_pb2.JobSpec(name=name, queue=queue, tasks=[common_pb2.TaskSpec(
        name="worker", replicas=1, resources={"nvidia.com/gpu": "1"})])


async def two_tenants(fed: Secure) -> tuple[Caller, Caller]:
    for tenant in ("alpha", "beta"):
        await fed.root.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name=tenant)))
        await fed.root.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(
            name=f"{tenant}-q", tenant=tenant)))
    return fed.as_(await fed.token("alpha")), fed.as_(await fed.token("beta"))


async def code_of(call: Awaitable[Any]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value.code(), info.value.details() or ""


async def test_calls_without_a_valid_token_are_unauthenticated(secure: Secure) -> None:
    anonymous, forged = secure.as_(None), secure.as_("fed_0123456789abcdef_" + "x" * 43)
    for caller in (anonymous, forged, secure.as_("not-a-token")):
        assert (await code_of(caller.jobs.ListJobs(jobs_pb2.ListJobsRequest())))[0] == grpc.StatusCode.UNAUTHENTICATED
        assert (await code_of(caller.admin.CreateTenant(admin_pb2.CreateTenantRequest(
            tenant=admin_pb2.Tenant(name="sneaky")))))[0] == grpc.StatusCode.UNAUTHENTICATED
    watch = anonymous.jobs.WatchJobs(jobs_pb2.WatchJobsRequest())
    assert (await code_of(watch.read()))[0] == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[attr-defined]
    tenants = (await secure.root.admin.ListTenants(admin_pb2.ListTenantsRequest())).tenants
    assert [t.name for t in tenants] == ["default"]  # nothing created: only the one every federation has
    # Health checks need no token: load balancers and kubelets probe them.
    health = health_pb2_grpc.HealthStub(secure.channel)
    status = await health.Check(health_pb2.HealthCheckRequest())
    assert status.status == health_pb2.HealthCheckResponse.SERVING


async def test_a_tenant_sees_and_changes_only_its_own_jobs(secure: Secure) -> None:
    alpha, beta = await two_tenants(secure)
    mine = (await alpha.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("a1", "alpha-q")))).job
    theirs = (await beta.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("b1", "beta-q")))).job
    assert (await alpha.jobs.GetJob(jobs_pb2.GetJobRequest(id=mine.id))).tenant == "alpha"

    missing = await code_of(alpha.jobs.GetJob(jobs_pb2.GetJobRequest(id="no-such-job")))
    for call in (alpha.jobs.GetJob(jobs_pb2.GetJobRequest(id=theirs.id)),
                 alpha.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=theirs.id)),
                 alpha.jobs.ExplainJob(jobs_pb2.ExplainJobRequest(id=theirs.id))):
        code, details = await code_of(call)
        # NOT_FOUND, worded as for a job that does not exist: existence does not leak
        assert (code, details.replace(theirs.id, "ID")) == (missing[0], missing[1].replace("no-such-job", "ID"))
    assert (await beta.jobs.GetJob(jobs_pb2.GetJobRequest(id=theirs.id))).status.phase == common_pb2.PENDING

    listed = await alpha.jobs.ListJobs(jobs_pb2.ListJobsRequest())
    assert [j.id for j in listed.jobs] == [mine.id]
    assert not (await alpha.jobs.ListJobs(jobs_pb2.ListJobsRequest(tenant="beta"))).jobs
    assert len((await secure.root.jobs.ListJobs(jobs_pb2.ListJobsRequest())).jobs) == 2  # admins see all

    # Submitting into another tenant's queue: that queue "does not exist", and nothing is stored.
    code, details = await code_of(alpha.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("a2", "beta-q"))))
    assert (code, details) == (grpc.StatusCode.INVALID_ARGUMENT, "spec.queue: queue 'beta-q' not found")
    async with secure.server.engine.connect() as conn:
        assert (await conn.execute(select(Job.name).order_by(Job.name))).scalars().all() == ["a1", "b1"]

    # A watch from the start of history shows alpha its own job's events only.
    seen: list[str] = []
    stream = alpha.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(after_sequence=0))
    later = (await beta.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("b2", "beta-q")))).job
    last = (await alpha.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("a3", "alpha-q")))).job
    async for event in stream:  # type: ignore[attr-defined]
        seen.append(event.job_id)
        if event.job_id == last.id:
            break
    stream.cancel()  # type: ignore[attr-defined]
    assert set(seen) == {mine.id, last.id} and later.id not in seen and theirs.id not in seen


async def _watch(caller: Caller, after: int, count: int) -> list[common_pb2.JobEvent]:
    stream = caller.jobs.WatchJobs(jobs_pb2.WatchJobsRequest(after_sequence=after))
    events = []
    async for event in stream:  # type: ignore[attr-defined]
        events.append(event)
        if len(events) == count:
            break
    stream.cancel()  # type: ignore[attr-defined]
    return events


async def test_nothing_a_tenant_reads_counts_another_tenants_work(secure: Secure) -> None:
    """Job ids, list page tokens and watch sequence numbers are the tenant's own: beta's bursts of work
    between alpha's submissions change nothing alpha can read."""
    alpha, beta = await two_tenants(secure)
    alpha_jobs = []
    for burst in (0, 7, 0, 3):
        if burst:
            await beta.jobs.SubmitJobs(jobs_pb2.SubmitJobsRequest(specs=[spec("b", "beta-q")] * burst))
        alpha_jobs.append((await alpha.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("a", "alpha-q")))).job)
    await alpha.jobs.CancelJob(jobs_pb2.CancelJobRequest(id=alpha_jobs[1].id))

    events = await _watch(alpha, 0, 5)  # four Submitted, one Cancelled: numbered 1 to 5, without beta's 10
    assert [e.sequence for e in events] == [1, 2, 3, 4, 5]
    assert [e.job_id for e in events] == [j.id for j in alpha_jobs] + [alpha_jobs[1].id]
    assert [e.sequence for e in await _watch(alpha, 3, 2)] == [4, 5]  # resuming by its own numbers
    assert [e.job_id for e in await _watch(alpha, 3, 2)] == [alpha_jobs[3].id, alpha_jobs[1].id]
    federation_wide = await _watch(secure.root, 0, 15)  # an admin numbers by the federation's log
    assert [e.sequence for e in federation_wide] == list(range(1, 16))

    # Ids are the name and a random suffix (generateName's alphabet), never a count.
    suffixes = [j.id.removeprefix("a-") for j in alpha_jobs]
    assert len(set(suffixes)) == 4 and all(len(s) == 8 and set(s) <= set("bcdfghjklmnpqrstvwxz2456789")
                                           for s in suffixes)
    # Page tokens name the last job of the page, and only the caller's jobs make valid tokens.
    first = await alpha.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=2))
    second = await alpha.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=2, page_token=first.next_page_token))
    assert [j.id for j in [*first.jobs, *second.jobs]] == [j.id for j in alpha_jobs] and not second.next_page_token
    assert base64.urlsafe_b64decode(first.next_page_token).decode() == f"after:{alpha_jobs[1].id}"
    beta_id = (await beta.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_size=1))).jobs[0].id
    forged = base64.urlsafe_b64encode(f"after:{beta_id}".encode()).decode()
    code, details = await code_of(alpha.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_token=forged)))
    nonexistent = base64.urlsafe_b64encode(b"after:no-such-job").decode()
    assert (code, details) == await code_of(alpha.jobs.ListJobs(jobs_pb2.ListJobsRequest(page_token=nonexistent)))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and details.startswith("page_token:")


async def test_only_admins_change_things_and_tenants_read_only_their_own(secure: Secure) -> None:
    alpha, _ = await two_tenants(secure)
    queue = admin_pb2.Queue(name="stolen", tenant="alpha")
    for call in (alpha.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=queue)),
                 alpha.admin.UpdateQueue(admin_pb2.UpdateQueueRequest(queue=admin_pb2.Queue(name="alpha-q", weight=9),
                                                                      update_mask=field_mask_pb2.FieldMask(
                                                                          paths=["weight"]))),
                 alpha.admin.DeleteQueue(admin_pb2.DeleteQueueRequest(name="alpha-q")),
                 alpha.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="gamma"))),
                 alpha.admin.CreateToken(admin_pb2.CreateTokenRequest(admin=True)),
                 alpha.admin.ListAuditEvents(admin_pb2.ListAuditEventsRequest())):
        assert (await code_of(call)) == (grpc.StatusCode.PERMISSION_DENIED, "this needs an admin token")
    queues = await secure.root.admin.ListQueues(admin_pb2.ListQueuesRequest())
    assert sorted((q.name, q.weight) for q in queues.queues) == [("alpha-q", 1), ("beta-q", 1), ("default", 1)]

    assert [q.name for q in (await alpha.admin.ListQueues(admin_pb2.ListQueuesRequest())).queues] == ["alpha-q"]
    assert [t.name for t in (await alpha.admin.ListTenants(admin_pb2.ListTenantsRequest())).tenants] == ["alpha"]
    assert (await code_of(alpha.admin.GetQueue(admin_pb2.GetQueueRequest(name="beta-q"))))[0] == \
        grpc.StatusCode.NOT_FOUND
    assert (await code_of(alpha.admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name="beta-q"))))[0] == \
        grpc.StatusCode.NOT_FOUND
    assert (await code_of(alpha.admin.GetTenant(admin_pb2.GetTenantRequest(name="beta"))))[0] == \
        grpc.StatusCode.NOT_FOUND


async def test_revoked_and_expired_tokens_stop_working(secure: Secure) -> None:
    alpha, _ = await two_tenants(secure)
    await alpha.jobs.ListJobs(jobs_pb2.ListJobsRequest())  # works, and is now trusted from the cache
    tokens = (await secure.root.admin.ListTokens(admin_pb2.ListTokensRequest(tenant="alpha"))).tokens
    await secure.root.admin.RevokeToken(admin_pb2.RevokeTokenRequest(id=tokens[0].id))
    assert (await code_of(alpha.jobs.ListJobs(jobs_pb2.ListJobsRequest()))) == \
        (grpc.StatusCode.UNAUTHENTICATED, "invalid or revoked token")

    brief = secure.as_(await secure.token("alpha", ttl=1))
    await brief.jobs.ListJobs(jobs_pb2.ListJobsRequest())
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        try:
            await brief.jobs.ListJobs(jobs_pb2.ListJobsRequest())
        except grpc.aio.AioRpcError as err:
            assert (err.code(), err.details()) == (grpc.StatusCode.UNAUTHENTICATED, "token expired")
            break
        assert asyncio.get_running_loop().time() < deadline, "a token with a 1 s lifetime kept working"
        await asyncio.sleep(0.2)


async def test_bad_token_requests_are_refused_with_the_field_and_store_nothing(secure: Secure) -> None:
    from tests.test_api_admin import violation_fields

    bad = [
        (["tenant"], admin_pb2.CreateTokenRequest(admin=True, tenant="alpha")),  # both
        (["tenant"], admin_pb2.CreateTokenRequest()),  # neither
        (["name"], admin_pb2.CreateTokenRequest(admin=True, name="Not A Label")),
        (["ttl"], admin_pb2.CreateTokenRequest(admin=True, ttl=duration_pb2.Duration(seconds=-5))),
    ]
    for fields, request in bad:
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await secure.root.admin.CreateToken(request)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert violation_fields(info.value) == fields
    unknown = await code_of(secure.root.admin.CreateToken(admin_pb2.CreateTokenRequest(tenant="nosuch")))
    assert unknown == (grpc.StatusCode.INVALID_ARGUMENT, "tenant: tenant 'nosuch' not found")
    assert len((await secure.root.admin.ListTokens(admin_pb2.ListTokensRequest())).tokens) == 1  # root's only


def test_a_broken_jwks_document_is_refused_at_start() -> None:
    from federation.security.oidc import OidcConfig, OidcVerifier

    with pytest.raises(ValueError, match="the JWKS document is not usable"):
        OidcVerifier(OidcConfig("https://login.example.com", "aud", '{"keys": "nope"}'))


async def test_tokens_are_stored_hashed(secure: Secure) -> None:
    bearer = await secure.token(admin=True)
    parsed = TOKEN.fullmatch(bearer)  # the secret may itself contain "_"
    assert parsed is not None
    secret = parsed.group(2)
    async with secure.server.engine.connect() as conn:
        rows = (await conn.execute(select(ApiToken))).mappings().all()
    assert len(rows) == 2
    assert not any(secret in str(value) for row in rows for value in row.values())


async def test_admin_changes_are_audited_with_who_and_before_after(secure: Secure) -> None:
    admin_token = await secure.token(admin=True)
    ops = secure.as_(admin_token)
    await ops.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="alpha")))
    await ops.admin.UpdateTenant(admin_pb2.UpdateTenantRequest(tenant=admin_pb2.Tenant(name="alpha", weight=3),
                                                               update_mask=field_mask_pb2.FieldMask(paths=["weight"])))
    await ops.admin.DeleteTenant(admin_pb2.DeleteTenantRequest(name="alpha"))
    events = (await secure.root.admin.ListAuditEvents(admin_pb2.ListAuditEventsRequest())).events
    ops_id = admin_token.split("_")[1]
    assert [(e.actor, e.action, e.kind, e.name) for e in events[:3]] == [
        (f"token {ops_id}", "delete", "tenant", "alpha"), (f"token {ops_id}", "update", "tenant", "alpha"),
        (f"token {ops_id}", "create", "tenant", "alpha")]
    delete, update, create = events[:3]
    assert (json.loads(update.before_json)["weight"], json.loads(update.after_json)["weight"]) == (1, 3)
    assert (create.before_json, json.loads(create.after_json)["name"]) == ("", "alpha")
    assert (json.loads(delete.before_json)["weight"], delete.after_json) == (3, "")
    token_event = events[3]
    assert (token_event.actor, token_event.action, token_event.kind, token_event.name) == \
        ("token " + (await secure.root.admin.ListTokens(admin_pb2.ListTokensRequest())).tokens[0].id + " (root)",
         "create", "token", ops_id)
    assert "secret_sha256" not in token_event.after_json


async def test_submit_rate_is_limited_per_token(db_url: URL) -> None:
    server, address = await secure_server(db_url, submit_rate=0.01, submit_burst=3)
    try:
        store = TokenStore(server.engine)
        _, root = await store.create("test", "root", None, True, timedelta(hours=1))
        async with grpc.aio.insecure_channel(address) as channel:
            fed = Secure(server, address, channel, Caller(jobs_pb2_grpc.JobServiceStub(channel),
                                                          admin_pb2_grpc.AdminServiceStub(channel)))
            fed.root = fed.as_(root)
            alpha, beta = await two_tenants(fed)
            batch = jobs_pb2.SubmitJobsRequest(specs=[spec(f"a{i}", "alpha-q") for i in range(3)])
            assert len((await alpha.jobs.SubmitJobs(batch)).results) == 3
            code, details = await code_of(alpha.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("a9", "alpha-q"))))
            assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "submit rate limit" in details
            await beta.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("b1", "beta-q")))  # its own bucket
            async with server.engine.connect() as conn:
                assert sorted((await conn.execute(select(Job.name))).scalars().all()) == ["a0", "a1", "a2", "b1"]
    finally:
        await server.stop(grace=0)


def test_the_cli_bootstraps_an_admin_token_and_uses_it(empty_db_url: URL, tmp_path: Path) -> None:
    """federation-server token create (straight into the database) -> fedctl with FEDERATION_TOKEN or its
    config file; without a token, fedctl says what to set, without a traceback."""
    url = empty_db_url.render_as_string(hide_password=False)
    server = ServerProcess("--database-url", url, "--auto-migrate", secure=True)
    try:
        made = subprocess.run([str(BIN / "federation-server"), "token", "create", "--admin", "--name", "ops",
                               "--database-url", url], capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        bearer = made.stdout.strip()
        config = tmp_path / "fedctl.yaml"
        env = {**os.environ, "FEDCTL_CONFIG": str(config)}
        env.pop("FEDERATION_TOKEN", None)

        def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(BIN / "fedctl"), "--server", server.address, *args], capture_output=True,
                                  text=True, timeout=60, env={**env, **extra})

        unknown = subprocess.run([str(BIN / "federation-server"), "token", "create", "--tenant", "nosuch",
                                  "--database-url", url], capture_output=True, text=True, timeout=60)
        assert unknown.returncode == 1 and "tenant 'nosuch' not found" in unknown.stderr
        assert "Traceback" not in unknown.stderr
        both = run("token", "create", "--admin", "--tenant", "ml", FEDERATION_TOKEN=bearer)
        assert both.returncode == 2 and "give exactly one of --admin or --tenant NAME" in both.stderr
        config.write_text("token: [not, a, string]\n")
        broken = run("list", "jobs")
        assert broken.returncode == 1 and f"{config}:1: token: must be a string" in broken.stderr
        config.unlink()
        refused = run("tenant", "create", "ml")
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert "UNAUTHENTICATED" in refused.stderr and "FEDERATION_TOKEN" in refused.stderr
        assert run("tenant", "create", "ml", FEDERATION_TOKEN=bearer).returncode == 0
        tenant_token = run("token", "create", "--tenant", "ml", "--ttl", "1h", FEDERATION_TOKEN=bearer)
        assert tenant_token.returncode == 0, tenant_token.stderr
        config.write_text(f"token: {tenant_token.stdout.strip()}\n")
        denied = run("tenant", "create", "other")  # the config file's tenant token
        assert denied.returncode == 1 and "this needs an admin token (PERMISSION_DENIED)" in denied.stderr
        audit = run("audit", "-o", "json", FEDERATION_TOKEN=bearer)
        events = json.loads(audit.stdout)["events"]
        assert [(e["action"], e["kind"], e["actor"]) for e in events[:2]] == [
            ("create", "token", f"token {bearer.split('_')[1]} (ops)"),
            ("create", "tenant", f"token {bearer.split('_')[1]} (ops)")]
    finally:
        assert server.stop() == 0


def _jwt_issuer() -> tuple[Any, str]:
    """A signing key and the JWKS document publishing its public half."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from jwt.algorithms import ECAlgorithm

    key = ec.generate_private_key(ec.SECP256R1())
    jwk = json.loads(ECAlgorithm.to_jwk(key.public_key()))
    return key, json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "ES256", "use": "sig"}]})


async def test_oidc_tokens_map_a_claim_to_the_tenant_or_to_admin(db_url: URL) -> None:
    import time as clock

    import jwt

    from federation.security.oidc import OidcConfig

    key, jwks = _jwt_issuer()
    stranger, _ = _jwt_issuer()
    issuer, audience = "https://login.example.com", "gpu-federation"

    def token(signer: Any = key, **claims: Any) -> str:
        body = {"iss": issuer, "aud": audience, "sub": "someone", "exp": int(clock.time()) + 300, **claims}
        return jwt.encode(body, signer, algorithm="ES256", headers={"kid": "k1"})

    server, address = await secure_server(db_url, oidc=OidcConfig(issuer, audience, jwks))
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            fed = Secure(server, address, channel, Caller(jobs_pb2_grpc.JobServiceStub(channel),
                                                          admin_pb2_grpc.AdminServiceStub(channel)))
            fed.root = fed.as_(token(sub="ops", groups=["federation-admins"]))
            alpha, beta = await two_tenants(fed)  # admins by their group created both tenants and queues
            alpha = fed.as_(token(sub="ann", tenant="alpha"))
            job = (await alpha.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=spec("a1", "alpha-q")))).job
            assert job.tenant == "alpha"
            assert (await code_of(alpha.admin.CreateTenant(admin_pb2.CreateTenantRequest(
                tenant=admin_pb2.Tenant(name="x")))))[0] == grpc.StatusCode.PERMISSION_DENIED
            assert (await code_of(beta.jobs.GetJob(jobs_pb2.GetJobRequest(id=job.id))))[0] == \
                grpc.StatusCode.NOT_FOUND
            refused = {
                "expired": token(tenant="alpha", exp=int(clock.time()) - 10),
                "another issuer": token(tenant="alpha", iss="https://evil.example.com"),
                "another audience": token(tenant="alpha", aud="something-else"),
                "another key": token(stranger, tenant="alpha"),
                "no tenant": token(),
            }
            for what, bad in refused.items():
                code, _ = await code_of(fed.as_(bad).jobs.ListJobs(jobs_pb2.ListJobsRequest()))
                assert code == grpc.StatusCode.UNAUTHENTICATED, what
            events = (await fed.root.admin.ListAuditEvents(admin_pb2.ListAuditEventsRequest(kind="tenant"))).events
            assert {e.actor for e in events} == {"oidc ops"}
    finally:
        await server.stop(grace=0)
