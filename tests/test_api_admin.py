"""AdminService over a real socket against real Postgres."""

import asyncio
from pathlib import Path

import grpc
import pytest
from google.protobuf import field_mask_pb2
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from federation.store.admin import AdminStore
from federation.v1 import admin_pb2, common_pb2, jobs_pb2
from tests.conftest import Api, make_queue


async def rpc_error(call) -> grpc.aio.AioRpcError:  # type: ignore[no-untyped-def]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value


def violation_fields(err: grpc.aio.AioRpcError) -> list[str]:
    status = rpc_status.from_call(err)
    assert status is not None
    bad = error_details_pb2.BadRequest()
    assert status.details[0].Unpack(bad)
    return [v.field for v in bad.field_violations]


async def test_tenant_crud(api: Api) -> None:
    created = await api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(
        name="ml", guarantee={"nvidia.com/gpu": "16", "memory": "1024Gi"}, limit={"cpu": "2000m"})))
    assert created.weight == 1  # default
    assert dict(created.guarantee) == {"nvidia.com/gpu": "16", "memory": "1Ti"}
    assert dict(created.limit) == {"cpu": "2"}
    assert created.create_time.seconds > 0

    updated = await api.admin.UpdateTenant(admin_pb2.UpdateTenantRequest(
        tenant=admin_pb2.Tenant(name="ml", weight=3, disabled=True),
        update_mask=field_mask_pb2.FieldMask(paths=["weight"])))
    assert updated.weight == 3
    assert not updated.disabled  # not in the mask
    assert dict(updated.guarantee) == {"nvidia.com/gpu": "16", "memory": "1Ti"}

    assert (await api.admin.GetTenant(admin_pb2.GetTenantRequest(name="ml"))).weight == 3
    await api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="bio")))
    listed = await api.admin.ListTenants(admin_pb2.ListTenantsRequest())
    assert [t.name for t in listed.tenants] == ["bio", "default", "ml"]  # default: as Volcano's default queue
    await api.admin.DeleteTenant(admin_pb2.DeleteTenantRequest(name="bio"))
    err = await rpc_error(api.admin.GetTenant(admin_pb2.GetTenantRequest(name="bio")))
    assert err.code() == grpc.StatusCode.NOT_FOUND


async def test_tenant_errors_change_nothing(api: Api) -> None:
    await api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml", weight=2)))
    err = await rpc_error(api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml"))))
    assert err.code() == grpc.StatusCode.ALREADY_EXISTS
    err = await rpc_error(api.admin.CreateTenant(admin_pb2.CreateTenantRequest(
        tenant=admin_pb2.Tenant(name="Bad Name", guarantee={"cpu": "x"}))))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violation_fields(err) == ["tenant.name", "tenant.guarantee['cpu']"]
    # an update that would make the guarantee exceed the limit is refused as a whole
    await api.admin.UpdateTenant(admin_pb2.UpdateTenantRequest(
        tenant=admin_pb2.Tenant(name="ml", guarantee={"nvidia.com/gpu": "8"}),
        update_mask=field_mask_pb2.FieldMask(paths=["guarantee"])))
    err = await rpc_error(api.admin.UpdateTenant(admin_pb2.UpdateTenantRequest(
        tenant=admin_pb2.Tenant(name="ml", weight=9, limit={"nvidia.com/gpu": "4"}),
        update_mask=field_mask_pb2.FieldMask(paths=["weight", "limit"]))))
    assert violation_fields(err) == ["tenant.guarantee['nvidia.com/gpu']"]
    err = await rpc_error(api.admin.UpdateTenant(admin_pb2.UpdateTenantRequest(
        tenant=admin_pb2.Tenant(name="ml"), update_mask=field_mask_pb2.FieldMask(paths=["name"]))))
    assert violation_fields(err) == ["update_mask"]
    unchanged = await api.admin.GetTenant(admin_pb2.GetTenantRequest(name="ml"))
    assert (unchanged.weight, dict(unchanged.limit)) == (2, {})
    assert [t.name for t in (await api.admin.ListTenants(admin_pb2.ListTenantsRequest())).tenants] == ["default", "ml"]


async def test_queue_crud_and_references(api: Api) -> None:
    err = await rpc_error(api.admin.CreateQueue(admin_pb2.CreateQueueRequest(
        queue=admin_pb2.Queue(name="train", tenant="ghost"))))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violation_fields(err) == ["queue.tenant"]
    await make_queue(api, "train", "ml", priority=5, limit={"nvidia.com/gpu": "64"})
    await make_queue(api, "dev", "ml")
    await make_queue(api, "other", "bio")
    queue = await api.admin.GetQueue(admin_pb2.GetQueueRequest(name="train"))
    assert (queue.tenant, queue.priority, queue.state, queue.weight) == ("ml", 5, admin_pb2.OPEN, 1)
    closed = await api.admin.UpdateQueue(admin_pb2.UpdateQueueRequest(
        queue=admin_pb2.Queue(name="train", state=admin_pb2.CLOSED), update_mask=field_mask_pb2.FieldMask(
            paths=["state"])))
    assert closed.state == admin_pb2.CLOSED
    assert closed.priority == 5
    listed = await api.admin.ListQueues(admin_pb2.ListQueuesRequest(tenant="ml"))
    assert [q.name for q in listed.queues] == ["dev", "train"]
    err = await rpc_error(api.admin.DeleteTenant(admin_pb2.DeleteTenantRequest(name="ml")))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    await api.admin.DeleteQueue(admin_pb2.DeleteQueueRequest(name="other"))
    await api.admin.DeleteTenant(admin_pb2.DeleteTenantRequest(name="bio"))


async def test_priority_classes_and_single_global_default(api: Api) -> None:
    await api.admin.CreatePriorityClass(admin_pb2.CreatePriorityClassRequest(priority_class=admin_pb2.PriorityClass(
        name="normal", value=100, preemptible=True, global_default=True)))
    err = await rpc_error(api.admin.CreatePriorityClass(admin_pb2.CreatePriorityClassRequest(
        priority_class=admin_pb2.PriorityClass(name="high", value=1000, global_default=True))))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    await api.admin.CreatePriorityClass(admin_pb2.CreatePriorityClassRequest(
        priority_class=admin_pb2.PriorityClass(name="high", value=1000)))
    updated = await api.admin.UpdatePriorityClass(admin_pb2.UpdatePriorityClassRequest(
        priority_class=admin_pb2.PriorityClass(name="high", description="prod"),
        update_mask=field_mask_pb2.FieldMask(paths=["description"])))
    assert (updated.value, updated.description, updated.preemptible) == (1000, "prod", False)
    listed = await api.admin.ListPriorityClasses(admin_pb2.ListPriorityClassesRequest())
    assert [(p.name, p.global_default) for p in listed.priority_classes] == [("high", False), ("normal", True)]
    await api.admin.DeletePriorityClass(admin_pb2.DeletePriorityClassRequest(name="high"))
    err = await rpc_error(api.admin.DeletePriorityClass(admin_pb2.DeletePriorityClassRequest(name="high")))
    assert err.code() == grpc.StatusCode.NOT_FOUND


async def test_clusters_list_and_cordon(api: Api) -> None:
    store = AdminStore(api.server.engine)
    await store.register_cluster("h100-east", {"accelerator": "h100"}, "0.1.0")
    await store.register_cluster("cpu-west", {}, "0.1.0")
    listed = await api.admin.ListClusters(admin_pb2.ListClustersRequest())
    assert [(c.name, c.status) for c in listed.clusters] == [("cpu-west", admin_pb2.READY),
                                                             ("h100-east", admin_pb2.READY)]
    cordoned = await api.admin.CordonCluster(admin_pb2.CordonClusterRequest(name="h100-east"))
    assert cordoned.cordoned
    await store.register_cluster("h100-east", {"accelerator": "h100"}, "0.1.1")  # an agent reconnects
    again = await api.admin.GetCluster(admin_pb2.GetClusterRequest(name="h100-east"))
    assert again.cordoned and again.agent_version == "0.1.1"
    assert not (await api.admin.UncordonCluster(admin_pb2.UncordonClusterRequest(name="h100-east"))).cordoned
    err = await rpc_error(api.admin.CordonCluster(admin_pb2.CordonClusterRequest(name="nowhere")))
    assert err.code() == grpc.StatusCode.NOT_FOUND


async def test_queues_are_reclaimable_unless_told_otherwise(api: Api) -> None:
    await api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
    q = await api.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(name="a", tenant="ml")))
    assert q.reclaimable  # as in Volcano, and as the scheduler's model has always assumed
    q = await api.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(
        name="b", tenant="ml", reclaimable=False)))
    assert not q.reclaimable


async def test_flavors_and_the_quotas_that_name_them(api: Api) -> None:
    gpu = "nvidia.com/gpu"
    flavor = await api.admin.CreateFlavor(admin_pb2.CreateFlavorRequest(flavor=admin_pb2.Flavor(
        name="h100", resource=gpu, cluster_selector={"accelerator": "h100"})))
    assert (flavor.name, flavor.resource, dict(flavor.cluster_selector)) == ("h100", gpu, {"accelerator": "h100"})
    err = await rpc_error(api.admin.CreateFlavor(admin_pb2.CreateFlavorRequest(flavor=admin_pb2.Flavor(
        name="bad", resource=gpu))))
    assert violation_fields(err) == ["flavor.cluster_selector"]
    await api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(
        name="ml", guarantee={f"{gpu}@h100": "16"})))
    q = await api.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=admin_pb2.Queue(
        name="serve", tenant="ml", flavors=["h100"], limit={f"{gpu}@h100": "32"})))
    assert list(q.flavors) == ["h100"] and dict(q.limit) == {f"{gpu}@h100": "32"}
    for bad, field in ((admin_pb2.Queue(name="x", tenant="ml", flavors=["b200"]), "queue.flavors[0]"),
                       (admin_pb2.Queue(name="x", tenant="ml", guarantee={"cpu@h100": "4"}),
                        "queue.guarantee['cpu@h100']")):
        err = await rpc_error(api.admin.CreateQueue(admin_pb2.CreateQueueRequest(queue=bad)))
        assert violation_fields(err) == [field]
    err = await rpc_error(api.admin.DeleteFlavor(admin_pb2.DeleteFlavorRequest(name="h100")))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "still used by ml, serve" in err.details()
    status = await api.admin.GetQueueStatus(admin_pb2.GetQueueStatusRequest(name="serve"))
    assert dict(status.deserved) == {}  # no cluster, no demand: nothing deserved yet, per flavor or not


async def test_hierarchical_queues_as_volcano_has_them(api: Api) -> None:
    """A queue may name a parent queue of its tenant; jobs go to leaf queues; no loops, no orphans."""
    await make_queue(api, "eng", "ml")
    await make_queue(api, "prod", "ml", parent="eng", weight=3)
    await make_queue(api, "dev", "ml", parent="eng")
    await make_queue(api, "other", "bio")
    assert (await api.admin.GetQueue(admin_pb2.GetQueueRequest(name="prod"))).parent == "eng"
    for parent, problem in (("other", "of tenant 'bio'"), ("ghost", "not found")):
        err = await rpc_error(api.admin.CreateQueue(admin_pb2.CreateQueueRequest(
            queue=admin_pb2.Queue(name="x", tenant="ml", parent=parent))))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and problem in err.details()
        assert violation_fields(err) == ["queue.parent"]
    err = await rpc_error(api.admin.UpdateQueue(admin_pb2.UpdateQueueRequest(
        queue=admin_pb2.Queue(name="eng", parent="prod"), update_mask=field_mask_pb2.FieldMask(paths=["parent"]))))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "loop" in err.details()
    assert (await api.admin.GetQueue(admin_pb2.GetQueueRequest(name="eng"))).parent == ""  # nothing changed

    parent_spec = common_pb2.JobSpec(name="j", queue="eng", tasks=[common_pb2.TaskSpec(
        name="worker", replicas=1, resources={"nvidia.com/gpu": "8", "cpu": "4"})])
    err = await rpc_error(api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=parent_spec)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and "dev, prod" in err.details()
    assert violation_fields(err) == ["spec.queue"]
    err = await rpc_error(api.admin.DeleteQueue(admin_pb2.DeleteQueueRequest(name="eng")))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "parent of dev, prod" in err.details()

    parent_spec.queue = "prod"
    await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=parent_spec))
    err = await rpc_error(api.admin.CreateQueue(admin_pb2.CreateQueueRequest(
        queue=admin_pb2.Queue(name="canary", tenant="ml", parent="prod"))))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "unfinished" in err.details()

    moved = await api.admin.UpdateQueue(admin_pb2.UpdateQueueRequest(
        queue=admin_pb2.Queue(name="dev", parent=""), update_mask=field_mask_pb2.FieldMask(paths=["parent"])))
    assert moved.parent == ""
    await api.admin.DeleteQueue(admin_pb2.DeleteQueueRequest(name="dev"))


async def test_a_new_federation_has_volcanos_default_queue(api: Api) -> None:
    """Volcano always has a `default` queue: a job naming no queue goes there, and it cannot be deleted."""
    queue = await api.admin.GetQueue(admin_pb2.GetQueueRequest(name="default"))
    assert (queue.tenant, queue.weight, queue.reclaimable, queue.state) == ("default", 1, True, admin_pb2.OPEN)
    job = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=common_pb2.JobSpec(name="j", tasks=[
        common_pb2.TaskSpec(name="worker", replicas=1, resources={"cpu": "1"})])))).job
    assert (job.spec.queue, job.tenant) == ("default", "default")
    err = await rpc_error(api.admin.DeleteQueue(admin_pb2.DeleteQueueRequest(name="default")))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION and "close it instead" in err.details()


async def test_a_tenants_cap_and_a_queues_default_hold_its_jobs_run_times(api: Api) -> None:
    """Issue 46 (3): a queue's default maximum run time for jobs that name none, held to its tenant's cap; a job
    asking more than the cap is refused naming the annotation; bad durations are refused naming the field."""
    from tests.processes import fedctl
    from tests.test_api_jobs import spec

    await api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(
        name="ml", max_run_time="24h")))
    await make_queue(api, "train", "ml", max_run_time="4h")
    await make_queue(api, "long", "ml", max_run_time="48h")  # more than its tenant allows: held to the cap
    await make_queue(api, "free", "ml")

    async def held(queue: str, own: str | None = None) -> str | None:
        asked = spec(queue=queue)
        if own is not None:
            asked.annotations["federation.dev/max-run-time"] = own
        job = (await api.jobs.SubmitJob(jobs_pb2.SubmitJobRequest(spec=asked))).job
        stored = await api.jobs.GetJob(jobs_pb2.GetJobRequest(id=job.id))
        return stored.spec.annotations.get("federation.dev/max-run-time")

    assert await held("train") == "4h"  # the queue's default
    assert await held("train", "30m") == "30m"  # its own, within the cap
    assert await held("long") == "24h"  # the queue's default, held to the tenant's cap
    assert await held("free") == "24h"  # no default: the cap
    err = await rpc_error(held("train", "36h"))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert violation_fields(err) == ["spec.annotations['federation.dev/max-run-time']"]
    assert "36h is more than tenant 'ml' allows its jobs (24h)" in err.details()

    for bad in ("soon", "0s", "1" * 40):
        err = await rpc_error(api.admin.UpdateQueue(admin_pb2.UpdateQueueRequest(
            queue=admin_pb2.Queue(name="train", max_run_time=bad),
            update_mask=field_mask_pb2.FieldMask(paths=["max_run_time"]))))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and violation_fields(err) == ["queue.max_run_time"]
    assert (await api.admin.GetQueue(admin_pb2.GetQueueRequest(name="train"))).max_run_time == "4h"  # unchanged
    cleared = await api.admin.UpdateTenant(admin_pb2.UpdateTenantRequest(
        tenant=admin_pb2.Tenant(name="ml"), update_mask=field_mask_pb2.FieldMask(paths=["max_run_time"])))
    assert cleared.max_run_time == ""
    assert await held("long") == "48h"  # no cap any more

    shown = await asyncio.to_thread(fedctl, api.address, "queue", "update", "free", "--max-run-time", "2h")
    assert shown.returncode == 0, shown.stderr
    listed = await asyncio.to_thread(fedctl, api.address, "get", "queues")
    assert "MAX-RUN" in listed.stdout and "2h" in listed.stdout, listed.stdout


async def test_lending_limits_on_guarantees_from_the_api_fedctl_and_manifests(api: Api, tmp_path: Path) -> None:
    """Issue 46 (2): a lending limit per resource of a guarantee, 0 kept (lend none); more than the guarantee, or
    of a resource not guaranteed, refused naming the field and changing nothing."""
    from tests.processes import fedctl

    created = await api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(
        name="ml", guarantee={"nvidia.com/gpu": "16"}, lending_limit={"nvidia.com/gpu": "0"})))
    assert dict(created.lending_limit) == {"nvidia.com/gpu": "0"}  # lends none of it: a zero that counts
    for bad, why in (({"nvidia.com/gpu": "17"}, "lending limit 17 exceeds guarantee 16"),
                     ({"cpu": "1"}, "lends cpu but guarantees none of it")):
        err = await rpc_error(api.admin.UpdateTenant(admin_pb2.UpdateTenantRequest(
            tenant=admin_pb2.Tenant(name="ml", lending_limit=bad),
            update_mask=field_mask_pb2.FieldMask(paths=["lending_limit"]))))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and why in err.details()
        assert violation_fields(err) == [f"tenant.lending_limit[{next(iter(bad))!r}]"]
    assert dict((await api.admin.GetTenant(admin_pb2.GetTenantRequest(name="ml"))).lending_limit) == {
        "nvidia.com/gpu": "0"}  # unchanged

    made = await asyncio.to_thread(fedctl, api.address, "queue", "create", "train", "--tenant", "ml",
                                   "--guarantee", "nvidia.com/gpu=8", "--lending-limit", "nvidia.com/gpu=2")
    assert made.returncode == 0, made.stderr
    assert dict((await api.admin.GetQueue(admin_pb2.GetQueueRequest(name="train"))).lending_limit) == {
        "nvidia.com/gpu": "2"}
    refused = await asyncio.to_thread(fedctl, api.address, "queue", "update", "train", "--lending-limit",
                                      "nvidia.com/gpu=9")
    assert refused.returncode != 0 and "queue.lending_limit['nvidia.com/gpu']: lending limit 9 exceeds guarantee 8" \
        in refused.stderr and "Traceback" not in refused.stderr
    listed = await asyncio.to_thread(fedctl, api.address, "get", "queues")
    header, row = listed.stdout.splitlines()[0], next(r for r in listed.stdout.splitlines() if r.startswith("train"))
    assert row.split()[header.split().index("LENDING-LIMIT")] == "nvidia.com/gpu=2", listed.stdout

    manifest = tmp_path / "queues.yaml"
    manifest.write_text("apiVersion: federation.dev/v1\nkind: Queue\nmetadata:\n  name: serve\nspec:\n"
                        "  tenant: ml\n  guarantee:\n    nvidia.com/gpu: \"4\"\n  lendingLimit:\n"
                        "    nvidia.com/gpu: \"1\"\n")
    applied = await asyncio.to_thread(fedctl, api.address, "apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    assert dict((await api.admin.GetQueue(admin_pb2.GetQueueRequest(name="serve"))).lending_limit) == {
        "nvidia.com/gpu": "1"}


async def test_admission_checks_on_queues_and_flavors_from_the_api_and_fedctl(api: Api) -> None:
    """Issue 46 (4): the checks a queue's or a flavor's jobs pass first, by name; a bad name or a repeat refused
    naming the field and changing nothing."""
    from tests.processes import fedctl

    await api.admin.CreateTenant(admin_pb2.CreateTenantRequest(tenant=admin_pb2.Tenant(name="ml")))
    made = await asyncio.to_thread(fedctl, api.address, "queue", "create", "train", "--tenant", "ml",
                                   "--admission-check", "provisioning", "--admission-check", "budget")
    assert made.returncode == 0, made.stderr
    queue = await api.admin.GetQueue(admin_pb2.GetQueueRequest(name="train"))
    assert list(queue.admission_checks) == ["provisioning", "budget"]
    for bad, field, why in ((["budget", "budget"], "queue.admission_checks", "names a check twice"),
                            (["Not A Name"], "queue.admission_checks[0]", "")):
        err = await rpc_error(api.admin.UpdateQueue(admin_pb2.UpdateQueueRequest(
            queue=admin_pb2.Queue(name="train", admission_checks=bad),
            update_mask=field_mask_pb2.FieldMask(paths=["admission_checks"]))))
        assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and why in err.details()
        assert violation_fields(err) == [field]
    assert list((await api.admin.GetQueue(admin_pb2.GetQueueRequest(name="train"))).admission_checks) == [
        "provisioning", "budget"]  # unchanged
    flavor = await asyncio.to_thread(fedctl, api.address, "flavor", "create", "h100", "--resource", "nvidia.com/gpu",
                                     "--selector", "gpu=h100", "--admission-check", "capacity-reservation")
    assert flavor.returncode == 0, flavor.stderr
    listed = await asyncio.to_thread(fedctl, api.address, "get", "flavors")
    header, row = listed.stdout.splitlines()[0], listed.stdout.splitlines()[1]
    assert row.split()[header.split().index("CHECKS")] == "capacity-reservation"
    # Only an admin says how a job's check stands; a job that is not dispatched has none waiting.
    err = await rpc_error(api.admin.SetAdmissionCheck(admin_pb2.SetAdmissionCheckRequest(
        job_id="", name="budget", state="READY")))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT and violation_fields(err) == ["job_id"]
    err = await rpc_error(api.admin.SetAdmissionCheck(admin_pb2.SetAdmissionCheckRequest(
        job_id="no-such-job", name="budget", state="READY")))
    assert err.code() == grpc.StatusCode.NOT_FOUND
