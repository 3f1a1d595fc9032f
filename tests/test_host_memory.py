"""The peak host memory figure counts what the process allocated, not the mapped libraries' pages."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_dlperf.child.measure import peak_host_memory_bytes

STATUS = """Name:\tpython
VmPeak:\t 9000000 kB
VmHWM:\t  460000 kB
VmRSS:\t  450000 kB
RssAnon:\t  300000 kB
RssFile:\t  150000 kB
RssShmem:\t       0 kB
"""


def test_the_file_backed_pages_are_left_out_of_the_peak():
    assert peak_host_memory_bytes(STATUS) == (460000 - 150000) * 1024


def test_the_same_allocation_reads_the_same_whatever_the_library_pages():
    """Two readings whose only difference is how many library pages are resident (what the page
    cache's state decides) give the same figure."""
    warm_cache = STATUS
    cold_cache = STATUS.replace("460000", "385000").replace("450000", "375000").replace("150000", "75000")
    assert peak_host_memory_bytes(warm_cache) == peak_host_memory_bytes(cold_cache)


PROBE = """
import sys
from pytest_dlperf.child.measure import peak_host_memory_bytes
before = peak_host_memory_bytes()
block = bytearray(int(sys.argv[1]) * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
print(peak_host_memory_bytes() - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_an_allocation_in_a_real_process_is_counted():
    grown = int(subprocess.run([sys.executable, "-c", PROBE, "64"], capture_output=True, text=True,
                               check=True).stdout)
    assert 60 * 2**20 <= grown <= 80 * 2**20
