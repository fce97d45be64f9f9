# bwd-env.sh — sourced by the backward's GPU-machine scripts (bwd-steps.sh, profile-backward.sh): installs flashtile's
# wheel from .device/python when it was carried (else one installed by an earlier call on this warm machine is used),
# and sets PYTHONPATH, the kernel cache in /tmp and, where bench/device/fa4-install.sh installed it, FA4's path and
# kernel cache. Returns 2 when the wheel does not install.
if ls .device/python/flashtile-*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/flashtile-site \
    .device/python/flashtile-*.whl || return 2
fi
export PYTHONPATH=/tmp/flashtile-site PYTHONUNBUFFERED=1 FLASHTILE_CACHE_DIR=/tmp/flashtile-cache
if [ -f /tmp/fa4-env.sh ]; then
  source /tmp/fa4-env.sh
  export PYTHONPATH=$FA4_PYTHONPATH:$PYTHONPATH FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED=1 \
    FLASH_ATTENTION_CUTE_DSL_CACHE_DIR=/tmp/fa4-cache
fi
