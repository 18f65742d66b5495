"""The tests' Hugging Face Hub stand-in: :mod:`metrobench.standins.hf_hub` (shared with the rehearsal)."""

from metrobench.standins.hf_hub import LFS_SUFFIXES, FakeHub, git_sha1

__all__ = ["FakeHub", "LFS_SUFFIXES", "git_sha1"]
