"""Dynamic Resource Allocation (resource.k8s.io/v1) as the federation and its agents read it: what a pod's
ResourceClaims ask for, and which published devices satisfy them.

A pod names claims in `spec.resourceClaims`, each made from a ResourceClaimTemplate (`resourceClaimTemplateName`)
the job carries. A claim's requests each ask for `count` devices of a DeviceClass, narrowed by CEL selectors; the
class's own selectors apply too. Devices are published by drivers in ResourceSlices, per node. The federation counts
a request's devices under the class's implicit extended resource name (`deviceclass.resource.kubernetes.io/<class>`,
as Kubernetes names it), so inventories, quotas and fair shares see DRA devices like any resource; the agent picks
the devices, as kube-scheduler's DynamicResources plugin would.

Pure: parsed objects in, decisions out. CEL is evaluated with cel-python, with the Kubernetes `quantity` library.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from federation.kernel.resources import Resources

CLASS_RESOURCE = "deviceclass.resource.kubernetes.io/"  # + a DeviceClass's name: Kubernetes' implicit name for it
API = "resource.k8s.io/v1"


class ClaimError(ValueError):
    """A template or pod claim the federation cannot act on: the field at fault, and why."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def class_resource(device_class: str) -> str:
    return CLASS_RESOURCE + device_class


@dataclass(frozen=True)
class DeviceRequest:
    """One request of a claim: `count` devices of `device_class` that every selector accepts."""

    name: str
    device_class: str
    count: int
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...]

    def demand(self) -> Resources:
        out: Resources = {}
        for r in self.requests:
            out[class_resource(r.device_class)] = out.get(class_resource(r.device_class), 0) + r.count
        return out


def _cel_list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ClaimError(f"{path}", "expected a list")
    return value


def claim_spec(spec: Any, path: str) -> ClaimSpec:
    """A ResourceClaimSpec (`spec.devices.requests`) as requests; refused with the field at fault where the
    federation cannot count it (allocation mode All, prioritized lists, constraints, configs it would not pass)."""
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(devices, dict):
        raise ClaimError(f"{path}.devices", "expected a mapping with requests")
    for unsupported in ("constraints", "config"):
        if devices.get(unsupported):
            raise ClaimError(f"{path}.devices.{unsupported}", "not supported by the federation's allocator")
    requests = []
    for i, req in enumerate(_cel_list(devices.get("requests"), f"{path}.devices.requests")):
        rpath = f"{path}.devices.requests[{i}]"
        if not isinstance(req, dict) or not isinstance(req.get("name"), str) or not req["name"]:
            raise ClaimError(f"{rpath}.name", "every request needs a name")
        if "firstAvailable" in req:
            raise ClaimError(f"{rpath}.firstAvailable", "prioritized lists are not supported by the federation")
        exactly = req.get("exactly")
        if not isinstance(exactly, dict) or not isinstance(exactly.get("deviceClassName"), str):
            raise ClaimError(f"{rpath}.exactly.deviceClassName", "required")
        mode = exactly.get("allocationMode", "ExactCount")
        if mode != "ExactCount":
            raise ClaimError(f"{rpath}.exactly.allocationMode", f"{mode!r} cannot be counted against quotas before "
                             "allocation; ask for an exact count")
        count = exactly.get("count", 1)
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ClaimError(f"{rpath}.exactly.count", f"{count!r} must be a whole number of at least 1")
        selectors = []
        for j, sel in enumerate(_cel_list(exactly.get("selectors"), f"{rpath}.exactly.selectors")):
            expression = (sel.get("cel") or {}).get("expression") if isinstance(sel, dict) else None
            if not isinstance(expression, str):
                raise ClaimError(f"{rpath}.exactly.selectors[{j}].cel.expression", "required")
            import celpy  # CEL on first use: it takes 0.1-0.2 s to import, and most callers never need it

            try:
                _program(expression)
            except celpy.CELParseError as err:
                raise ClaimError(f"{rpath}.exactly.selectors[{j}].cel.expression",
                                 "does not parse as CEL: " + " ".join(str(err).split())[:400]) from None
            except CelTooCostly as err:
                raise ClaimError(f"{rpath}.exactly.selectors[{j}].cel.expression", str(err)) from None
            selectors.append(expression)
        requests.append(DeviceRequest(req["name"], exactly["deviceClassName"], count, tuple(selectors)))
    if not requests:
        raise ClaimError(f"{path}.devices.requests", "a claim asks for at least one device")
    return ClaimSpec(tuple(requests))


def _selector_texts(text: str) -> list[str]:
    """The CEL expressions a template's text holds, read before any is compiled (not JSON: none)."""
    try:
        obj = json.loads(text)
        requests = obj["spec"]["spec"]["devices"]["requests"]
        return [sel["cel"]["expression"] for req in requests for sel in req["exactly"]["selectors"]
                if isinstance(sel["cel"]["expression"], str)]
    except (ValueError, KeyError, TypeError, RecursionError):
        return []


def templates(templates_json: Iterable[str]) -> dict[str, ClaimSpec]:
    """The job's ResourceClaimTemplates by name."""
    out: dict[str, ClaimSpec] = {}
    templates_json = list(templates_json)
    selectors = sum(len(sel) for text in templates_json for sel in _selector_texts(text))
    if selectors > MAX_CEL_PER_JOB:
        raise ClaimError("resource_claim_templates_json", f"its CEL selectors hold {selectors:,} characters, at most "
                         f"{MAX_CEL_PER_JOB:,} are allowed in one job")
    for i, text in enumerate(templates_json):
        path = f"resource_claim_templates_json[{i}]"
        try:
            obj = json.loads(text)
        except ValueError as err:
            raise ClaimError(f"{path}", f"not JSON ({err})") from None
        if not isinstance(obj, dict) or obj.get("kind") != "ResourceClaimTemplate" or obj.get("apiVersion") != API:
            raise ClaimError(f"{path}", f"expected a ResourceClaimTemplate of {API}")
        name = (obj.get("metadata") or {}).get("name")
        if not isinstance(name, str) or not name:
            raise ClaimError(f"{path}.metadata.name", "required")
        out[name] = claim_spec((obj.get("spec") or {}).get("spec"), f"{path}.spec.spec")
    return out


def pod_claims(pod_template_json: str) -> list[tuple[str, str]]:
    """A pod template's claims: (claim name, the template it is made from)."""
    if not pod_template_json:
        return []
    try:
        spec = (json.loads(pod_template_json) or {}).get("spec") or {}
    except (ValueError, AttributeError, RecursionError):
        return []  # said by the pod template's own checks
    claims = spec.get("resourceClaims") if isinstance(spec, dict) else None
    out = []
    for i, claim in enumerate(claims if isinstance(claims, list) else []):
        path = f"pod_template_json.spec.resourceClaims[{i}]"
        if not isinstance(claim, dict) or not isinstance(claim.get("name"), str):
            raise ClaimError(f"{path}.name", "required")
        if "resourceClaimName" in claim:
            raise ClaimError(f"{path}.resourceClaimName", "a claim shared between pods is not supported; name a "
                             "ResourceClaimTemplate (resourceClaimTemplateName) the job carries")
        template = claim.get("resourceClaimTemplateName")
        if not isinstance(template, str) or not template:
            raise ClaimError(f"{path}.resourceClaimTemplateName", "required")
        out.append((claim["name"], template))
    return out


def pod_demand(pod_template_json: str, by_name: Mapping[str, ClaimSpec]) -> Resources:
    """The devices one pod's claims ask for, per class resource."""
    out: Resources = {}
    for i, (_, template) in enumerate(pod_claims(pod_template_json)):
        spec = by_name.get(template)
        if spec is None:
            raise ClaimError(f"pod_template_json.spec.resourceClaims[{i}].resourceClaimTemplateName", f"{template!r} "
                             "is not among the job's ResourceClaimTemplates")
        for r, n in spec.demand().items():
            out[r] = out.get(r, 0) + n
    return out


def narrowed(pod_template_json: str, by_name: Mapping[str, ClaimSpec] | None) -> tuple[DeviceRequest, ...]:
    """The requests of one pod's claims that have CEL selectors of their own: they take only some of their class's
    devices, so where one pod fits is not what the class's count says (the agent narrows that count per node)."""
    if not by_name:
        return ()
    try:
        pairs = pod_claims(pod_template_json)
    except ClaimError:
        return ()
    return tuple(r for _, template in pairs if (spec := by_name.get(template)) is not None
                 for r in spec.requests if r.selectors)


# -- devices and CEL ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """One published device: where it is (`node`, "" for devices of no one node), its identity, and the CEL view of
    its attributes and capacity."""

    driver: str
    pool: str
    name: str
    node: str
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # domain -> id -> value
    capacity: Mapping[str, Mapping[str, int]] = field(default_factory=dict)  # domain -> id -> amount

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.driver, self.pool, self.name)


def _qualified(name: str, driver: str) -> tuple[str, str]:
    domain, slash, ident = name.rpartition("/")
    return (domain, ident) if slash else (driver, name)


def _attribute(value: Any) -> Any:
    if not isinstance(value, dict):
        return None
    for kind in ("string", "int", "bool", "version"):
        if kind in value:
            return value[kind]
    return None


def _amount(quantity: Any) -> int:
    from kubernetes.utils.quantity import parse_quantity  # on first use: the package takes 0.2-0.5 s to import

    value = parse_quantity(str(quantity))
    return int(value) if value == value.to_integral_value() else int(value.to_integral_value(rounding="ROUND_CEILING"))


def slice_devices(resource_slice: Mapping[str, Any]) -> list[Device]:
    """The devices a ResourceSlice publishes."""
    spec = resource_slice.get("spec") or {}
    driver, pool = spec.get("driver", ""), (spec.get("pool") or {}).get("name", "")
    node = spec.get("nodeName") or ""
    out = []
    for d in spec.get("devices") or []:
        attributes: dict[str, dict[str, Any]] = {}
        for name, value in (d.get("attributes") or {}).items():
            domain, ident = _qualified(name, driver)
            attributes.setdefault(domain, {})[ident] = _attribute(value)
        capacity: dict[str, dict[str, int]] = {}
        for name, value in (d.get("capacity") or {}).items():
            domain, ident = _qualified(name, driver)
            capacity.setdefault(domain, {})[ident] = _amount((value or {}).get("value", "0"))
        out.append(Device(driver, pool, d.get("name", ""), node, attributes, capacity))
    return out


@functools.cache
def _functions() -> dict[str, Any]:
    """Kubernetes' CEL `quantity()` library: a quantity as its amount in base units, compared as one."""
    from celpy import celtypes

    class Quantity(celtypes.IntType):  # type: ignore[misc]
        pass

    return {
        "quantity": lambda text: Quantity(_amount(str(text))),
        "compareTo": lambda a, b: celtypes.IntType((int(a) > int(b)) - (int(a) < int(b))),
        "isGreaterThan": lambda a, b: celtypes.BoolType(int(a) > int(b)),
        "isLessThan": lambda a, b: celtypes.BoolType(int(a) < int(b)),
        "asInteger": lambda a: celtypes.IntType(int(a)),
        "asApproximateFloat": lambda a: celtypes.DoubleType(float(int(a))),
    }


# Bounds on a CEL selector, checked before it is compiled and so before it is evaluated (Kubernetes bounds a DRA
# selector's length at 10 Ki and its estimated cost; these are the same idea sized for an interpreter in Python).
MAX_CEL_LENGTH = 10 * 1024  # characters
MAX_CEL_PER_JOB = 64 * 1024  # characters of selectors over all of a job's templates: compiled at submit
MAX_CEL_NESTING = 32  # brackets of any kind open at once: the parser and evaluator recurse on them
MAX_CEL_COST = 4_000  # syntax-tree nodes evaluated, a comprehension's body once per element (~5 µs each)
DYNAMIC_RANGE = 32  # elements of a range that is not a literal: a device has at most 32 attributes and capacities
_MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})


class CelTooCostly(ValueError):
    """A selector beyond the bounds above: refused at submit; passed over (as not accepting) where it is met."""


def _nesting(expression: str) -> int:
    """The deepest bracket nesting outside string literals (a quote inside a literal, escaped, is skipped)."""
    depth = deepest = 0
    quote, escaped = "", False
    for ch in expression:
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in ")]}":
            depth -= 1
    return deepest


def _range_size(tree: Any) -> int:
    """At most how many elements a comprehension's range holds: its literal elements, and DYNAMIC_RANGE for each
    value it reads from the device."""
    literal = sum(len(t.children[0].children) if t.children and hasattr(t.children[0], "children") else 0
                  for t in tree.iter_subtrees() if t.data in ("list_lit", "map_lit"))
    reads = sum(1 for t in tree.iter_subtrees() if t.data == "ident")
    return literal + DYNAMIC_RANGE * reads


def _cost(tree: Any, times: int = 1) -> int:
    """Nodes evaluated, a comprehension's body (the second argument of all, exists, map...) once per element."""
    if not hasattr(tree, "children"):
        return 0
    if tree.data == "member_dot_arg" and len(tree.children) == 3 and str(tree.children[1]) in _MACROS:
        target, _, args = tree.children
        body = args.children[1:] if hasattr(args, "children") else []
        each = times * _range_size(target)
        return times + _cost(target, times) + sum(_cost(b, each) for b in body)
    return times + sum(_cost(child, times) for child in tree.children)


@functools.lru_cache(maxsize=1024)
def _program(expression: str) -> Any:
    """The compiled selector, once per expression; CelTooCostly when it is beyond the bounds."""
    if len(expression) > MAX_CEL_LENGTH:
        raise CelTooCostly(f"is {len(expression)} characters long, at most {MAX_CEL_LENGTH} are allowed")
    if (nesting := _nesting(expression)) > MAX_CEL_NESTING:
        raise CelTooCostly(f"nests brackets {nesting} deep, at most {MAX_CEL_NESTING} are allowed")
    import celpy

    env = celpy.Environment()
    ast = env.compile(expression)
    if (cost := _cost(ast)) > MAX_CEL_COST:
        raise CelTooCostly(f"would evaluate about {cost:,} steps per device, at most {MAX_CEL_COST:,} are allowed")
    return env.program(ast, functions=_functions())


def _cel_device(device: Device) -> Any:
    import celpy

    return celpy.json_to_cel({
        "driver": device.driver,
        "attributes": {d: dict(v) for d, v in device.attributes.items()},
        "capacity": {d: {k: int(a) for k, a in v.items()} for d, v in device.capacity.items()},
        "allowMultipleAllocations": False})


def accepts(expressions: Sequence[str], device: Device) -> bool:
    """Whether every CEL selector accepts the device. An expression that fails on it (a missing attribute, a
    type mismatch) does not: Kubernetes' allocator would stop with that error; here the device is passed over."""
    if not expressions:
        return True
    import celpy
    from celpy import celtypes

    view = {"device": _cel_device(device)}
    for expression in expressions:
        try:
            result = _program(expression).evaluate(view)
        except (celpy.CELEvalError, celpy.CELParseError, CelTooCostly, RecursionError):
            return False  # a DeviceClass the cluster holds is not checked at submit: its selectors may be anything
        if not isinstance(result, celtypes.BoolType) or not bool(result):
            return False
    return True


@dataclass(frozen=True)
class Allocation:
    """A claim's devices: (request name, device) each."""

    results: tuple[tuple[str, Device], ...]


def allocate(claim: ClaimSpec, classes: Mapping[str, Sequence[str]], free: Sequence[Device]) -> Allocation | str:
    """Devices for each request of the claim among `free` (devices of one node, not allocated to any claim), in
    their (driver, pool, name) order; or why not. `classes`: each DeviceClass's selectors."""
    taken: set[tuple[str, str, str]] = set()
    results = []
    ordered = sorted(free, key=lambda d: d.key)
    for req in claim.requests:
        if req.device_class not in classes:
            return f"request {req.name}: DeviceClass {req.device_class} does not exist in this cluster"
        wanted = (*classes[req.device_class], *req.selectors)
        chosen = [d for d in ordered if d.key not in taken and accepts(wanted, d)][:req.count]
        if len(chosen) < req.count:
            return (f"request {req.name}: {len(chosen)} of {req.count} {req.device_class} devices free that its "
                    "selectors accept")
        taken.update(d.key for d in chosen)
        results.extend((req.name, d) for d in chosen)
    return Allocation(tuple(results))


def class_selectors(device_class: Mapping[str, Any]) -> list[str]:
    """A DeviceClass's CEL selectors."""
    return [s["cel"]["expression"] for s in (device_class.get("spec") or {}).get("selectors") or []
            if isinstance(s, dict) and isinstance(s.get("cel"), dict) and "expression" in s["cel"]]


def allocated(claims: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    """The devices ResourceClaims hold (their status.allocation)."""
    out = set()
    for claim in claims:
        alloc = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        for r in alloc.get("results") or []:
            out.add((r.get("driver", ""), r.get("pool", ""), r.get("device", "")))
    return out


def claim_status(allocation: Allocation, node: str, pod_name: str, pod_uid: str) -> dict[str, Any]:
    """The status kube-scheduler's DRA plugin writes: the devices, the node they are usable from, and the pod that
    holds the claim."""
    return {"allocation": {
        "devices": {"results": [{"request": req, "driver": d.driver, "pool": d.pool, "device": d.name}
                                for req, d in allocation.results]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node]}]}]}},
        "reservedFor": [{"resource": "pods", "name": pod_name, "uid": pod_uid}]}
