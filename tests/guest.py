"""The QEMU guest of the tests that boot one against `vmio serve` (test_serve_guest.py,
test_real_ext4.py, test_real_pdc.py): vmio.real.qemu, re-exported under the name they
import."""

from vmio.real.qemu import between_markers, build_initramfs, kernel, missing, run_guest

__all__ = ["between_markers", "build_initramfs", "kernel", "missing", "run_guest"]
