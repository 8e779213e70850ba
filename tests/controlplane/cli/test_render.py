from controlplane.cli import render


def test_table_aligns_columns_and_right_aligns_numbers():
    text = render.table(["ID", "Name", "State"], [[1, "a", "ACTIVE"], [12, "longer-name", None]])
    lines = text.splitlines()
    assert lines[0] == " ID | Name        | State"
    assert lines[1] == "----+-------------+--------"
    assert lines[2] == "  1 | a           | ACTIVE"
    assert lines[3] == " 12 | longer-name |"
    # Determined users grep experiment ids like this.
    assert [line.split("|")[0].strip() for line in lines[2:]] == ["1", "12"]


def test_table_renders_floats_bools_and_json():
    text = render.table(["v", "b", "h"], [[0.123456789, True, {"lr": 0.1}]])
    assert "0.123457" in text and "True" in text and '{"lr": 0.1}' in text


def test_table_rejects_ragged_rows():
    import pytest

    with pytest.raises(ValueError):
        render.table(["a", "b"], [[1]])


def test_table_with_no_rows_has_header_and_rule():
    assert render.table(["A", "Bee"], []).splitlines() == [" A | Bee", "---+-----"]


def test_sparkline_scales_min_to_max():
    assert render.sparkline([1, 2, 3, 4, 5, 6, 7, 8]) == "▁▂▃▄▅▆▇█"
    assert render.sparkline([0.9, 0.5, 0.4, 0.25]) == "█▄▃▁"


def test_sparkline_edge_cases():
    assert render.sparkline([]) == ""
    assert render.sparkline([3, 3, 3]) == "▁▁▁"
    assert render.sparkline([1, float("nan"), None, "x", float("inf"), 2]) == "▁█"


def test_formatters():
    assert render.format_state("STATE_COMPLETED") == "COMPLETED"
    assert render.format_progress(0.5) == "50.0%"
    assert render.format_progress(None) == ""
    assert render.format_time("2025-03-20T12:00:00.123Z") == "2025-03-20 12:00:00+0000"
    assert render.format_time(None) == ""
    assert render.format_size(3 * 1024 * 1024) == "3.0 MiB"
    assert render.format_size(10) == "10 B"
