"""Visual grades of candidates: the CSV a grader exports from the gallery, checked, the rounds of
the ``visual_grades`` table, and the grades a training set uses.

A grades CSV has a header with :data:`GRADE_COLUMNS`: the object, its grade, one of :data:`GRADES`
(A: confident lens, B: probable, C: possible, ``not_a_lens``) or :data:`UNGRADED` (shown to the
grader, not graded: sent to inspection and awaiting it), and what the grader saw: the candidate's
position [deg], score, the lens finder's content hash and its known flag (the gallery's export
writes every candidate it shows). The CSV is self-contained, so ``visual_grades`` needs no
other table: it is where the human judgement enters the lake, the way the sweeps are where the
survey enters it, which keeps the grading loop (grades → next ``training_set`` → lens finder →
search → candidates → gallery → grades) a DAG. Every landing (``dhs grade`` or the UI's
launchpad) additionally checks the rows against the published candidates
(:func:`checked_grades_file`), and lands only the bytes it checked.

A file is landed as one round: ``visual_grades`` keeps every earlier round as it was and appends
the new one with the next round number, so each round can be reproduced and a training set
records which rounds it used (:func:`grades_for_training`). An object shown in a round and never
graded is awaiting inspection (:func:`awaiting_inspection`): a high-scoring negative that may be
a lens, which the next training set leaves out, as the published recipe takes the negatives that
scored high out of training and sends them to inspection (Inchausti et al. 2025).
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import stat

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..storage import PartitionedTable

GRADES = ("A", "B", "C", "not_a_lens")
#: The grade of a candidate the gallery showed and the grader left ungraded.
UNGRADED = "ungraded"
#: Grades that make a candidate a lens (a positive of the next training set, with the grade as tier).
LENS_GRADES = ("A", "B", "C")
#: What the grader saw, copied from the candidate (the gallery's export writes these).
CANDIDATE_COLUMNS = ("ra", "dec", "score", "model_version", "known")
#: Columns a grades CSV must have.
GRADE_COLUMNS = ("object_id", "grade", *CANDIDATE_COLUMNS)
GRADES_SCHEMA = pa.schema(
    [
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
    ]
)
_BOOLS = {"true": True, "1": True, "false": False, "0": False}
#: Bytes a grades file may hold: some 200,000 rows of the gallery's export, far more than a
#: grader sees in a round; a larger file is not one.
MAX_GRADES_BYTES = 16 * 2**20
#: An object id as the gallery writes it: ASCII digits, an optional minus (``str.isdigit`` would
#: take superscripts and other scripts' digits).
_ID_RE = re.compile(r"-?[0-9]+", re.ASCII)


def read_grades_file(path: str, max_bytes: int = MAX_GRADES_BYTES) -> bytes:
    """The bytes of the grades file ``path``: InputError naming it when it cannot be read, is not a
    regular file (a device, a pipe, a folder) or holds more than ``max_bytes`` bytes."""
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                raise InputError(f"{path}: not a regular file")
            payload = f.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from exc
    if len(payload) > max_bytes:
        raise InputError(f"{path}: larger than {max_bytes:,} bytes, the most a grades file may hold")
    return payload


def check_not_landed(previous: pa.Table | None, payload: bytes, where: str) -> None:
    """InputError when a round of ``previous`` (the published rounds) was landed from the same
    bytes (sha256) as ``payload``: landing it again would add a second identical round."""
    if previous is None or previous.num_rows == 0:
        return
    digest = hashlib.sha256(payload).hexdigest()
    same = pc.equal(previous.column("source_sha256"), digest)
    if pc.any(same).as_py():
        landed = int(pc.min(previous.column("round").filter(same)).as_py())
        raise InputError(
            f"{where}: already landed as round {landed} (the same bytes, sha256 {digest[:16]}…): "
            "pass --again to land it as a new round"
        )


def _number(value: str, where: str, column: str, lo: float, hi: float) -> float:
    try:
        if not value.isascii():  # float() reads other scripts' digits too
            raise ValueError(value)
        x = float(value)
    except ValueError:
        raise InputError(f"{where}: {column} {value!r} is not a number") from None
    if not lo <= x <= hi:
        raise InputError(f"{where}: {column} {x} is outside [{lo}, {hi}]")
    return x


_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def _parse_row(row: dict, where: str, n_fields: int) -> tuple:
    if None in row or None in row.values():  # csv.DictReader's marks of a long and a short row
        n = n_fields + len(row.get(None) or ()) - sum(v is None for v in row.values())
        raise InputError(f"{where}: {n} fields, the header has {n_fields}")
    oid, grade = (row.get("object_id") or "").strip(), (row.get("grade") or "").strip()
    if not _ID_RE.fullmatch(oid):
        raise InputError(f"{where}: object_id {oid!r} is not an integer (ASCII digits)")
    if not _INT64_MIN <= int(oid) <= _INT64_MAX:
        raise InputError(f"{where}: object_id {oid} out of range: object ids are 64-bit signed integers")
    if grade not in (*GRADES, UNGRADED):
        raise InputError(f"{where}: grade {grade!r} is not one of {[*GRADES, UNGRADED]}")
    known = (row.get("known") or "").strip().lower()
    if known not in _BOOLS:
        raise InputError(f"{where}: known {row.get('known')!r} is not true or false")
    version = (row.get("model_version") or "").strip()
    if not version:
        raise InputError(f"{where}: model_version is empty")
    return (
        int(oid),
        grade,
        _number(row["ra"], where, "ra", 0.0, 360.0),
        _number(row["dec"], where, "dec", -90.0, 90.0),
        _number(row["score"], where, "score", 0.0, 1.0),
        version,
        _BOOLS[known],
    )


def parse_grades_csv(payload: bytes, where: str) -> pa.Table:
    """The rows of a grades CSV (``where`` names it in errors) as :data:`GRADE_COLUMNS`, checked:
    header, integer ids, the grade vocabulary, position and score ranges, one grade per object."""
    try:
        text = payload.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not UTF-8 text ({exc})") from exc
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in GRADE_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise InputError(
            f"{where}: missing column(s) {missing}; the header must name {list(GRADE_COLUMNS)} "
            f"(the gallery's 'Export grades' writes them; got {reader.fieldnames})"
        )
    try:
        rows = [_parse_row(row, f"{where}:{reader.line_num}", len(reader.fieldnames)) for row in reader]
    except csv.Error as exc:  # raised inside a record, before the reader counts its line
        raise InputError(f"{where}:{reader.line_num + 1}: {exc}") from exc
    if not rows:
        raise InputError(f"{where}: no grades (only a header)")
    values, counts = np.unique([r[0] for r in rows], return_counts=True)
    if (counts > 1).any():
        raise InputError(f"{where}: object_id {int(values[counts > 1][0])} is graded more than once")
    fields = [GRADES_SCHEMA.field(c) for c in GRADE_COLUMNS]
    return pa.Table.from_pylist([dict(zip(GRADE_COLUMNS, r)) for r in rows], schema=pa.schema(fields))


def checked_grades_file(
    path: str, expected_sha256: str, candidates: PartitionedTable, previous: pa.Table | None, again: bool = False
) -> bytes:
    """The bytes of the grades file ``path``, checked as ``dhs grade`` checks them, whichever path
    launched the landing (the command line or the UI): the bytes that were checked
    (``expected_sha256``, when given), every row a published candidate (``candidates``), not a file
    a round of ``previous`` already holds unless ``again``. InputError naming the file otherwise."""
    payload = read_grades_file(path)
    digest = hashlib.sha256(payload).hexdigest()
    if expected_sha256 and digest != expected_sha256:
        raise InputError(
            f"{path}: changed since it was checked (sha256 {digest[:16]}…, checked {expected_sha256[:16]}…): "
            "nothing landed; run dhs grade again"
        )
    if not candidates.exists():
        raise InputError(f"{path}: no published candidates to check the grades against (materialize candidates)")
    check_against_candidates(parse_grades_csv(payload, path), candidates.read(), path)
    if not again:
        check_not_landed(previous, payload, path)
    return payload


def check_against_candidates(grades: pa.Table, candidates: pa.Table, where: str, tolerance_arcsec: float = 0.1) -> None:
    """Raise unless every graded object is a published candidate of the same lens finder at the
    same position (within ``tolerance_arcsec``): a CSV exported from an older search is refused."""
    pos = pc.index_in(grades.column("object_id"), candidates.column("object_id"))
    if pos.null_count:
        unknown = grades.column("object_id").filter(pos.is_null()).to_pylist()
        raise InputError(f"{where}: {len(unknown)} object_id(s) are not candidates, e.g. {unknown[:5]}")
    cand = candidates.take(pos)
    other = pc.not_equal(grades.column("model_version"), cand.column("model_version")).to_numpy(zero_copy_only=False)
    if other.any():
        i = int(np.flatnonzero(other)[0])
        raise InputError(
            f"{where}: object_id {grades.column('object_id')[i].as_py()} was graded on model "
            f"{grades.column('model_version')[i].as_py()[:16]}…, the candidates are of "
            f"{cand.column('model_version')[i].as_py()[:16]}…"
        )
    dra = (grades.column("ra").to_numpy() - cand.column("ra").to_numpy()) * np.cos(
        np.radians(cand.column("dec").to_numpy())
    )
    sep = np.hypot(dra, grades.column("dec").to_numpy() - cand.column("dec").to_numpy()) * 3600.0
    if (sep > tolerance_arcsec).any():
        i = int(np.argmax(sep))
        raise InputError(
            f"{where}: object_id {grades.column('object_id')[i].as_py()} is {sep[i]:.2f} arcsec from its candidate's "
            "position"
        )


def new_round(previous: pa.Table | None, grades: pa.Table, source_file: str, payload: bytes) -> pa.Table:
    """``previous`` (the published rounds, or None) with ``grades`` (a parsed CSV) appended as the
    next round; without ``grades`` (None) the previous rounds, or an empty table."""
    prior = (
        GRADES_SCHEMA.empty_table() if previous is None else previous.select(GRADES_SCHEMA.names).cast(GRADES_SCHEMA)
    )
    if grades is None:
        return prior
    number = 1 if prior.num_rows == 0 else int(pc.max(prior.column("round")).as_py()) + 1
    n = grades.num_rows
    cols = {
        "round": pa.array([number] * n, pa.int64()),
        **{c: grades.column(c) for c in GRADE_COLUMNS},
        "source_file": pa.array([source_file] * n),
        "source_sha256": pa.array([hashlib.sha256(payload).hexdigest()] * n),
    }
    return pa.concat_tables([prior, pa.Table.from_pydict(cols, schema=GRADES_SCHEMA)])


def changed_earlier_rows(previous: pa.Table | None, current: pa.Table) -> int:
    """Rows of ``previous`` that ``current`` does not hold unchanged (0 = earlier rounds intact)."""
    if previous is None or previous.num_rows == 0:
        return 0
    old = current.filter(pc.less_equal(current.column("round"), pc.max(previous.column("round"))))
    if old.num_rows != previous.num_rows:
        return abs(previous.num_rows - old.num_rows) or previous.num_rows
    return int(sum(a != b for a, b in zip(previous.select(GRADES_SCHEMA.names).to_pylist(), old.to_pylist())))


def _rounds_upto(grades: pa.Table | None, upto_round: int) -> pa.Table:
    """The rows of rounds 1..``upto_round`` (-1: every round, 0: none)."""
    if grades is None or upto_round == 0:
        return GRADES_SCHEMA.empty_table()
    return grades.filter(pc.less_equal(grades.column("round"), upto_round)) if upto_round > 0 else grades


def latest_grades(grades: pa.Table | None, upto_round: int = -1) -> pa.Table:
    """(object_id, grade, round) of each object graded in rounds 1..``upto_round`` (-1: every round,
    0: none), with its latest grade: a later round regrades an object (a later round that only
    shows it again does not)."""
    rows = _rounds_upto(grades, upto_round)
    rows = rows.filter(pc.not_equal(rows.column("grade"), UNGRADED))
    latest = rows.sort_by([("object_id", "ascending"), ("round", "descending")])
    ids = latest.column("object_id").to_numpy()
    first = np.flatnonzero(np.r_[True, ids[1:] != ids[:-1]]) if ids.size else np.zeros(0, np.int64)
    return latest.take(pa.array(first, pa.int64())).select(["object_id", "grade", "round"])


def awaiting_inspection(grades: pa.Table | None, upto_round: int = -1, latest: pa.Table | None = None) -> np.ndarray:
    """(K,) int64 ids, sorted, of the objects shown ungraded in rounds 1..``upto_round`` (-1: every
    round, 0: none) and graded in none of them (``latest``: their :func:`latest_grades`, when known)."""
    rows = _rounds_upto(grades, upto_round)
    shown = pc.unique(rows.filter(pc.equal(rows.column("grade"), UNGRADED)).column("object_id"))
    graded = (latest_grades(rows) if latest is None else latest).column("object_id")
    return np.sort(shown.filter(pc.invert(pc.is_in(shown, graded))).to_numpy())


def grades_for_training(grades: pa.Table | None, upto_round: int = -1) -> tuple[pa.Table, np.ndarray, dict]:
    """(:func:`latest_grades`, :func:`awaiting_inspection`, the record of what a training set used:
    the rounds, the SHA-256 of those rows (the grades table is append-only, so rounds and hash name
    the version) and the counts)."""
    used = _rounds_upto(grades, upto_round).sort_by([("round", "ascending"), ("object_id", "ascending")])
    digest = hashlib.sha256(
        json.dumps(used.select(GRADES_SCHEMA.names).to_pylist(), sort_keys=True).encode()
    ).hexdigest()
    latest = latest_grades(used)
    awaiting = awaiting_inspection(used, latest=latest)
    grade = latest.column("grade").to_pylist()
    return (
        latest,
        awaiting,
        {
            "rounds": sorted(set(used.column("round").to_pylist())),
            "grades_sha256": digest,
            "n_lenses": sum(g in LENS_GRADES for g in grade),
            "n_not_a_lens": sum(g == "not_a_lens" for g in grade),
            "n_awaiting_inspection": int(awaiting.size),
        },
    )


def graded_lens_ids(grades: pa.Table | None) -> np.ndarray:
    """(K,) int64 ids of the objects whose latest grade (any round) is a lens grade: no longer
    negatives anywhere a false-positive rate is measured (an inspection round removes them)."""
    latest = latest_grades(grades)
    return latest.filter(pc.is_in(latest.column("grade"), pa.array(list(LENS_GRADES)))).column("object_id").to_numpy()


def published_graded_lens_ids(grades: PartitionedTable) -> np.ndarray:
    """:func:`graded_lens_ids` of the published ``visual_grades`` table ``grades`` (none before a
    round is landed)."""
    return graded_lens_ids(grades.read() if grades.exists() else None)
