#!/bin/sh
# after_stop: put the plain nvidia_drm module back (undoes unlock_display_ram).
set -eu
if ! command -v modprobe >/dev/null 2>&1; then echo "restore_display_ram: modprobe not found" >&2; exit 1; fi
sudo -n modprobe -r nvidia_drm
sudo -n modprobe nvidia_drm
echo "restore_display_ram: nvidia_drm restored"
