"""Visual grades of candidates: the CSV a grader exports from the gallery, checked, and the rounds of
the ``visual_grades`` table.

A grades CSV has a header with at least ``object_id`` and ``grade`` (the gallery also writes
``model_version``); each grade is one of :data:`GRADES` (A: confident lens, B: probable, C:
possible, ``not_a_lens``) and each object id must be a candidate. A file is landed as one round:
``visual_grades`` keeps every earlier round as it was and appends the new one with the next
round number, so each round can be reproduced and a training set can say which rounds it used.
"""

from __future__ import annotations

import csv
import hashlib
import io

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError

GRADES = ("A", "B", "C", "not_a_lens")
#: Columns a grades CSV must have.
GRADE_COLUMNS = ("object_id", "grade")
#: Candidate columns copied onto each grade (so a later training set needs no other table).
CANDIDATE_COLUMNS = ("ra", "dec", "score", "model_version", "known")
GRADES_SCHEMA = pa.schema([
    pa.field("round", pa.int64(), nullable=False),
    pa.field("object_id", pa.int64(), nullable=False),
    pa.field("grade", pa.string(), nullable=False),
    pa.field("ra", pa.float64(), nullable=False),
    pa.field("dec", pa.float64(), nullable=False),
    pa.field("score", pa.float64(), nullable=False),
    pa.field("model_version", pa.string(), nullable=False),
    pa.field("known", pa.bool_(), nullable=False),
    pa.field("source_file", pa.string(), nullable=False),
    pa.field("source_sha256", pa.string(), nullable=False),
])


def parse_grades_csv(payload: bytes, where: str, candidate_ids) -> pa.Table:
    """(object_id int64, grade) rows of a grades CSV (``where`` names it in errors), checked:
    header, integer ids, the grade vocabulary, one grade per object, every id a candidate."""
    try:
        text = payload.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text ({exc})") from exc
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in GRADE_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(f"{where}: missing column(s) {missing}; the header must name {list(GRADE_COLUMNS)} (got {reader.fieldnames})")
    ids, grades = [], []
    for line, row in enumerate(reader, start=2):
        oid, grade = (row.get("object_id") or "").strip(), (row.get("grade") or "").strip()
        if not oid.lstrip("-").isdigit():
            raise InputError(f"{where}:{line}: object_id {oid!r} is not an integer")
        if grade not in GRADES:
            raise InputError(f"{where}:{line}: grade {grade!r} is not one of {list(GRADES)}")
        ids.append(int(oid))
        grades.append(grade)
    if not ids:
        raise InputError(f"{where}: no grades (only a header)")
    values, counts = np.unique(ids, return_counts=True)
    if (counts > 1).any():
        raise InputError(f"{where}: object_id {int(values[counts > 1][0])} is graded more than once")
    unknown = sorted(set(ids) - set(np.asarray(candidate_ids).tolist()))
    if unknown:
        raise InputError(f"{where}: {len(unknown)} object_id(s) are not candidates, e.g. {unknown[:5]}")
    return pa.table({"object_id": pa.array(ids, pa.int64()), "grade": pa.array(grades, pa.string())})


def new_round(previous: pa.Table | None, grades: pa.Table, candidates: pa.Table, source_file: str, payload: bytes) -> pa.Table:
    """``previous`` (the published rounds, or None) with ``grades`` appended as the next round, each
    grade carrying its candidate's position, score, model version and known flag."""
    number = 1 if previous is None or previous.num_rows == 0 else int(pc.max(previous.column("round")).as_py()) + 1
    pos = pc.index_in(grades.column("object_id"), candidates.column("object_id"))
    if pos.null_count:
        raise InputError(f"{source_file}: grades of objects that are not candidates")
    cand = candidates.select(list(CANDIDATE_COLUMNS)).take(pos)
    n = grades.num_rows
    cols = {"round": pa.array([number] * n, pa.int64()), "object_id": grades.column("object_id"), "grade": grades.column("grade"),
            **{c: cand.column(c) for c in CANDIDATE_COLUMNS},
            "source_file": pa.array([source_file] * n), "source_sha256": pa.array([hashlib.sha256(payload).hexdigest()] * n)}
    landed = pa.Table.from_pydict(cols, schema=GRADES_SCHEMA)
    return landed if previous is None else pa.concat_tables([previous.select(GRADES_SCHEMA.names).cast(GRADES_SCHEMA), landed])


def changed_earlier_rows(previous: pa.Table | None, current: pa.Table) -> int:
    """Rows of ``previous`` that ``current`` does not hold unchanged (0 = earlier rounds intact)."""
    if previous is None or previous.num_rows == 0:
        return 0
    old = current.filter(pc.less_equal(current.column("round"), pc.max(previous.column("round"))))
    if old.num_rows != previous.num_rows:
        return abs(previous.num_rows - old.num_rows) or previous.num_rows
    return int(sum(a != b for a, b in zip(previous.select(GRADES_SCHEMA.names).to_pylist(), old.to_pylist())))

