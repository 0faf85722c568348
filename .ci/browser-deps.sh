#!/usr/bin/env bash
# Browser test dependencies for tests/test_app_browser.py, from the package registries only:
# Debian's Chromium (/usr/bin/chromium) and the Playwright Python client (PyPI) that drives it.
# Never `playwright install`: that downloads a browser build of its own, which CI cannot fetch.
# Run inside the activated test venv (the pip used is the active python's). Idempotent; exits 0
# without doing anything when both are already there. Needs root (or sudo) for apt-get.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if ! command -v chromium >/dev/null 2>&1; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
fi
if ! python -c "import playwright.sync_api" >/dev/null 2>&1; then
  python -m pip install --quiet "playwright>=1.40"
fi
chromium --version 2>/dev/null | head -1 || true
python -c "import importlib.metadata as m; print('playwright', m.version('playwright'))"
