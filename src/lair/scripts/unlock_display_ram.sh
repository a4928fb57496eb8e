#!/bin/sh
# before_serve: reload nvidia_drm with modeset=1 fbdev=0 so that the firmware's display reserve
# (about 2 GB per GPU on DGX Spark / GB10) becomes usable by the serving runtime. Temporary by
# design: no /etc/modprobe.d entry, nothing survives a reboot; restore_display_ram undoes it.
set -eu
if ! command -v modprobe >/dev/null 2>&1; then echo "unlock_display_ram: modprobe not found" >&2; exit 1; fi
if [ "$(cat /sys/module/nvidia_drm/parameters/modeset 2>/dev/null || echo N)" = "Y" ] &&
   [ "$(cat /sys/module/nvidia_drm/parameters/fbdev 2>/dev/null || echo Y)" = "N" ]; then
  echo "unlock_display_ram: already unlocked"; exit 0
fi
sudo -n modprobe -r nvidia_drm
sudo -n modprobe nvidia_drm modeset=1 fbdev=0
echo "unlock_display_ram: nvidia_drm reloaded with modeset=1 fbdev=0"
