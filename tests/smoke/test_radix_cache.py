"""SGLang's radix cache in both smoke servers: on by default, off with --no-radix-cache or
--disable-radix-cache, whatever the set's profile lists."""

from __future__ import annotations

import pytest

from patchkit.smoke.launch import RADIX_OFF


@pytest.mark.parametrize("option", [None, "--no-radix-cache", "--disable-radix-cache", "--radix-cache"])
def test_smoke_starts_both_servers_with_the_radix_cache_as_asked(smoke_env, option):
    # The profile lists --disable-radix-cache (as v1's and v3's do): by default it is dropped.
    manifest = smoke_env.set_dir / "manifest.toml"
    manifest.write_text(manifest.read_text().replace('"--random-seed", "0"]', f'"--random-seed", "0", "{RADIX_OFF}"]'))
    assert RADIX_OFF in manifest.read_text()
    out = smoke_env.run(*([option] if option else []))
    assert out.code == 0, out.stderr
    off = option in ("--no-radix-cache", "--disable-radix-cache")
    for role in ("baseline", "ddtree"):
        argv = (smoke_env.logs / f"{role}.log").read_text().splitlines()[0].split()
        assert argv.count(RADIX_OFF) == (1 if off else 0), argv
