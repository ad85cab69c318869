"""Typed CSV rows: columns from the row type, cells back in their types, the same bytes both ways."""

from dataclasses import dataclass

import pytest

from gpipe_repro.typed_csv import LATER, columns, later, read_csv, write_csv


@dataclass
class Row:
    name: str
    note: str | None
    K: int
    size: int | None
    ratio: float | None
    fits: bool | None
    pass_: str = "forward"


def test_a_row_type_gives_the_columns_and_reads_back_in_its_types(tmp_path):
    rows = [
        Row("a", None, 2, None, 0.1 + 0.2, True),
        Row("", "x, y", 8, 3, 5.0, None, "backward"),
    ]
    write_csv(tmp_path / "r.csv", Row, rows)
    assert columns(Row) == ["name", "note", "K", "size", "ratio", "fits", "pass"]
    back = read_csv(tmp_path / "r.csv", Row)
    assert back == rows  # "" stays a str where None is not allowed; 0.30000000000000004 exactly
    assert type(back[1].ratio) is float and type(back[0].K) is int


def test_a_read_and_a_write_give_the_same_bytes(tmp_path):
    text = "name,note,K,size,ratio,fits,pass\nb,,1,7,5,False,forward\nc,q,2,,1e-05,,fwd\n"
    (tmp_path / "in.csv").write_text(text)
    write_csv(tmp_path / "out.csv", Row, read_csv(tmp_path / "in.csv", Row))
    assert (tmp_path / "out.csv").read_text().replace("\r\n", "\n") == text


@dataclass
class Later:
    name: str
    K: int
    added: int | None = later()  # a column added after older files were written


def test_a_column_added_later_is_written_only_when_a_row_has_it(tmp_path):
    """An older file re-renders to the same bytes; a newer one keeps the column."""
    (tmp_path / "old.csv").write_text("name,K\r\nz,3\r\n")
    write_csv(tmp_path / "again.csv", Later, read_csv(tmp_path / "old.csv", Later))
    assert (tmp_path / "again.csv").read_bytes() == (tmp_path / "old.csv").read_bytes()
    write_csv(tmp_path / "new.csv", Later, [Later("z", 3), Later("y", 2, 7)])
    assert (tmp_path / "new.csv").read_text().splitlines() == ["name,K,added", "z,3,", "y,2,7"]


def test_a_column_the_file_lacks_reads_as_none(tmp_path):
    (tmp_path / "old.csv").write_text("name,K\nz,3\n")
    (row,) = read_csv(tmp_path / "old.csv", Row)
    assert (row.name, row.K, row.ratio, row.fits, row.note) == ("z", 3, None, None, None)


def _row_types() -> dict[tuple[str, ...], list[type]]:
    """Every dataclass of the package, by its columns (a report's row type is found by its header)."""
    import importlib
    import pkgutil
    from dataclasses import is_dataclass

    import gpipe_repro

    found: dict[tuple[str, ...], list[type]] = {}
    for info in pkgutil.walk_packages(gpipe_repro.__path__, "gpipe_repro."):
        if info.name.rsplit(".", 1)[-1] == "__main__":  # runs a command when imported
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if is_dataclass(value) and isinstance(value, type) and value.__module__ == info.name:
                found.setdefault(tuple(columns(value)), []).append(value)
    return found


def test_every_committed_report_csv_reads_back_and_writes_the_same_bytes(tmp_path):
    import csv
    from dataclasses import fields
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    types = _row_types()
    checked = []
    for path in sorted(root.glob("reports/*/*.csv")):
        with path.open(newline="") as f:
            header = tuple(next(csv.reader(f)))
        # a row type whose columns are the header's, or the header's and then columns added later
        # (optional: written only when some row has a value, ``rows.written``)
        matching = [
            t
            for cols, ts in types.items()
            if cols[: len(header)] == header
            for t in ts
            if all(f.metadata.get(LATER) for f in fields(t)[len(header) :])
        ]
        assert matching, f"{path.relative_to(root)} has no row type with its columns"
        for row_type in matching:
            out = tmp_path / f"{len(checked)}.csv"
            write_csv(out, row_type, read_csv(path, row_type))
            assert out.read_bytes() == path.read_bytes(), (path, row_type)
            checked.append(path)
    assert checked


def test_a_cell_that_breaks_its_type_is_refused_in_one_line(tmp_path):
    (tmp_path / "bad.csv").write_text("name,note,K,size,ratio,fits,pass\nb,,1,7,5,maybe,forward\n")
    with pytest.raises(ValueError) as err:
        read_csv(tmp_path / "bad.csv", Row)
    assert "Row.fits" in str(err.value) and "'maybe'" in str(err.value), err.value
