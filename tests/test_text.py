"""One table formatter and one test-name shortener for the terminal, the CLI and the page."""

from pytest_dlperf.text import duration, short_test, table


def test_a_table_aligns_its_columns_under_a_rule_and_is_empty_without_rows():
    lines = table(("setting", "img/s"), [("default", "10.0"), ("omp_num_threads", "12.5")])
    assert lines == ["setting          img/s", "---------------  -----",
                     "default          10.0", "omp_num_threads  12.5"]
    assert table(("a", "b"), []) == []


def test_a_test_keeps_its_file_name_and_loses_its_folders():
    assert short_test("perf_tests/test_x.py::test_y[torch-fp32]") == "test_x.py::test_y[torch-fp32]"
    assert short_test("test_top.py::Class::test_z") == "test_top.py::Class::test_z"
    assert short_test("no_separator") == "no_separator"


def test_a_duration_reads_in_the_two_largest_units_it_needs():
    assert [duration(s) for s in (0.4, 45, 60, 725, 3600, 3780, 11_000)] == [
        "0 s", "45 s", "1 min", "12 min 5 s", "1 h", "1 h 3 min", "3 h 3 min"]
