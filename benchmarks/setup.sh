#!/usr/bin/env bash
# Install what the benchmarks need and the package does not: run once per machine.
#
# Why a script of its own: nginx, wget, the Python docs and Scrapy are peers and fixtures
# of the benchmark, not dependencies of trio_crawler, so neither pyproject.toml nor the
# project's .venv gets them.
#
#   * nginx-light, wget, time, python3.11-doc: from Debian, with apt-get, only if missing
#     (nginx serves both sites; wget is a peer crawler; GNU time reports each crawler's
#     peak memory, see benchmarks/measure.py; python3.11-doc is the docs site, in
#     /usr/share/doc/python3.11/html).
#   * Scrapy: in a venv of its own, benchmarks/.venv (override with PEERS_VENV), so
#     its Twisted and lxml never meet the project's environment. The name is chosen so
#     that nothing needs configuring: the project's .gitignore has `.venv/`, which
#     matches at any depth, and ruff skips directories named .venv by default.
#   * Crawlee for Python (with its Parsel parser), beside Scrapy in the same venv: the
#     second peer of bench_pushback.py, the crawler of the Apify ecosystem, on asyncio.
#
# Usage, from anywhere:  bash benchmarks/setup.sh
# Environment: PYTHON (the interpreter that makes the venv, default python3),
#              PEERS_VENV (default benchmarks/.venv), SCRAPY (pip spec, default scrapy>=2.13),
#              CRAWLEE (pip spec, default crawlee[parsel]>=1.0).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
peers_venv="${PEERS_VENV:-$here/.venv}"
scrapy_spec="${SCRAPY:-scrapy>=2.13}"
crawlee_spec="${CRAWLEE:-crawlee[parsel]>=1.0}"
started=$(date +%s)

# Debian packages: install only what is missing, so a second run touches nothing.
missing=()
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
command -v wget >/dev/null 2>&1 || missing+=(wget)
[ -x /usr/bin/time ] || missing+=(time)
[ -f /usr/share/doc/python3.11/html/index.html ] || missing+=(python3.11-doc)
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup: apt-get install ${missing[*]}"
    sudo_cmd=()
    [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
        "${missing[@]}"
else
    echo "setup: nginx, wget, time and python3.11-doc are already installed"
fi

# Scrapy in its own venv; reuse the venv if Scrapy already imports there.
if [ -x "$peers_venv/bin/python" ] && "$peers_venv/bin/python" -c "import scrapy" 2>/dev/null; then
    echo "setup: Scrapy already in $peers_venv"
else
    echo "setup: making $peers_venv with $scrapy_spec"
    "$python" -m venv "$peers_venv"
    "$peers_venv/bin/python" -m pip install --quiet --upgrade pip
    "$peers_venv/bin/python" -m pip install --quiet "$scrapy_spec"
fi
"$peers_venv/bin/python" -c "import scrapy; print('setup: Scrapy', scrapy.__version__)"
# aiohttp and selectolax beside it, for floor_aiohttp.py (the yardstick outside our stack).
if ! "$peers_venv/bin/python" -c "import aiohttp, selectolax" 2>/dev/null; then
    "$peers_venv/bin/python" -m pip install --quiet aiohttp selectolax
fi
"$peers_venv/bin/python" -c "import aiohttp; print('setup: aiohttp', aiohttp.__version__)"
# Crawlee for Python, for bench_pushback.py; its Parsel parser is one Scrapy already brings.
if ! "$peers_venv/bin/python" -c "import crawlee.crawlers, parsel" 2>/dev/null; then
    "$peers_venv/bin/python" -m pip install --quiet "$crawlee_spec"
fi
"$peers_venv/bin/python" -c "import crawlee; print('setup: Crawlee', crawlee.__version__)"
echo "setup: done in $(($(date +%s) - started)) s"
