"""Storing submitted jobs: a batch at once, idempotent per request id, with ids as Kubernetes' generateName
makes them."""

from __future__ import annotations

import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

from federation.errors import AlreadyExists
from federation.store.database import driver
from federation.store.events import NOTIFY_CHANGES, EventRecord, append_events, insert_rows
from federation.store.models import (
    Job,
    SubmitKey,
    finished_jobs,
)

_jobs = Job.__table__
NEXT_SEQS = b"SELECT nextval(pg_get_serial_sequence('jobs', 'seq')) FROM generate_series(1, %s)"
IN_HISTORY = f"SELECT id FROM {finished_jobs.name} WHERE id = ANY(%s)".encode()


@dataclass(frozen=True)
class NewJob:
    """A validated job, ready to store."""

    name: str
    tenant: str
    queue: str
    priority_class: str
    priority: int
    request: dict[str, int]
    spec: dict[str, Any]  # JobSpec as protobuf JSON
    request_id: str
    reason: str


@dataclass(frozen=True)
class SubmitResult:
    job_id: str
    duplicate: bool


ID_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # Kubernetes' generateName: no vowels, no look-alikes


ID_SUFFIX = 8


ID_ATTEMPTS = 5


_ID_SPACE = len(ID_ALPHABET) ** ID_SUFFIX


def job_ids(names: Sequence[str], taken: Collection[str] = ()) -> list[str]:
    """For each name, `name-` and a random suffix, as Kubernetes' generateName: the id says nothing about how many
    jobs the federation (or any other tenant) has. 27^8 suffixes per name make a clash rare; none is drawn twice
    in a batch nor from `taken`, and `submit` retries the batch when one clashes with a live job. The entropy is
    drawn at once: a thousand draws of their own cost a submission's loop milliseconds."""
    entropy = secrets.token_bytes(8 * len(names))
    given = set(taken)
    out = []
    for i, name in enumerate(names):
        draw = int.from_bytes(entropy[8 * i:8 * i + 8], "big") % _ID_SPACE  # 27^8 in 2^64: no bias worth a name
        while True:
            suffix = []
            for _ in range(ID_SUFFIX):
                draw, digit = divmod(draw, len(ID_ALPHABET))
                suffix.append(ID_ALPHABET[digit])
            candidate = f"{name}-{''.join(suffix)}"
            if candidate not in given:
                break
            draw = secrets.randbelow(_ID_SPACE)
        given.add(candidate)
        out.append(candidate)
    return out


class Submission:
    """Submitting (a part of `JobStore`)."""

    engine: AsyncEngine

    async def submit(self, jobs: Sequence[NewJob]) -> list[SubmitResult]:
        """Store jobs atomically; a request_id already seen for the tenant yields its first job.

        Concurrent submits of one request_id serialise on the key's unique index: the loser's
        insert waits for the winner's commit, conflicts, and reads the winner's job id. A job id that
        happens to exist already (see `job_id`) undoes the batch, which is tried again with new ids.
        """
        for _ in range(ID_ATTEMPTS - 1):
            try:
                return await self._submit(jobs)
            except (IntegrityError, psycopg.errors.UniqueViolation) as err:  # (the rows go in by the driver)
                diag = getattr(getattr(err, "orig", err), "diag", None)
                if diag is None or diag.constraint_name != "jobs_pkey":
                    raise
        return await self._submit(jobs)

    async def _submit(self, jobs: Sequence[NewJob]) -> list[SubmitResult]:
        first_of: dict[tuple[str, str], int] = {}
        for i, job in enumerate(jobs):
            if job.request_id:
                first_of.setdefault((job.tenant, job.request_id), i)
        fresh = [i for i, job in enumerate(jobs) if not job.request_id or first_of[(job.tenant, job.request_id)] == i]
        async with self.engine.begin() as conn:
            groups = sorted({g for job in jobs if (g := job.spec.get("hyperjob", {}).get("id"))})
            if groups and (taken := (await conn.execute(
                    select(_jobs.c.hyperjob).where(_jobs.c.hyperjob.in_(groups)).limit(1))).scalar()):
                raise AlreadyExists(f"a HyperJob of id {taken!r} was submitted before: its sub-jobs come in one batch")
            raw = await driver(conn)  # the statements of every batch, by the driver (`database.driver`)
            seqs = [seq for seq, in await (await raw.execute(NEXT_SEQS, (len(fresh),))).fetchall()]
            seq_of = dict(zip(fresh, seqs, strict=True))
            id_of = dict(zip(fresh, job_ids([jobs[i].name for i in fresh]), strict=True))
            # An id the history holds is not given again (a live one undoes the batch on the primary key).
            while taken := {found for found, in await (await raw.execute(IN_HISTORY, (list(id_of.values()),)))
                            .fetchall()}:
                again = [i for i, candidate in id_of.items() if candidate in taken]
                kept = {c for c in id_of.values() if c not in taken}
                id_of.update(zip(again, job_ids([jobs[i].name for i in again], kept | taken), strict=True))

            # Keys in a fixed order, so that concurrent batches cannot deadlock on them.
            keys = sorted(first_of)
            seen_before: dict[tuple[str, str], str] = {}
            if keys:
                won = (await conn.execute(
                    insert(SubmitKey).values([
                        {"tenant": t, "request_id": r, "job_id": id_of[first_of[(t, r)]]} for t, r in keys
                    ]).on_conflict_do_nothing().returning(SubmitKey.tenant, SubmitKey.request_id)
                )).all()
                for t, r in set(keys) - {(t, r) for t, r in won}:
                    seen_before[(t, r)] = (await conn.execute(
                        select(SubmitKey.job_id).where(SubmitKey.tenant == t, SubmitKey.request_id == r)
                    )).scalar_one()

            results: list[SubmitResult] = []
            rows: list[dict[str, Any]] = []
            events: list[EventRecord] = []
            for i, job in enumerate(jobs):
                key = (job.tenant, job.request_id)
                if key in seen_before:
                    results.append(SubmitResult(seen_before[key], True))
                elif i not in id_of:  # repeats a request_id met earlier in this batch
                    results.append(SubmitResult(id_of[first_of[key]], True))
                else:
                    results.append(SubmitResult(id_of[i], False))
                    rows.append({
                        "id": id_of[i], "seq": seq_of[i], "name": job.name, "tenant": job.tenant,
                        "queue": job.queue, "priority_class": job.priority_class, "priority": job.priority,
                        "phase": "PENDING", "reason": job.reason, "request": job.request, "spec": job.spec,
                        "placements": [], "pods": [], "hyperjob": job.spec.get("hyperjob", {}).get("id", ""),
                    })
                    events.append(EventRecord(id_of[i], job.tenant, job.queue, "Submitted", "PENDING", job.reason))
            if rows:
                await insert_rows(conn, _jobs, rows)
            await append_events(conn, events)
            if rows:  # the other processes told in this transaction, delivered as it commits (not one of its own)
                await raw.execute(NOTIFY_CHANGES)
        return results
