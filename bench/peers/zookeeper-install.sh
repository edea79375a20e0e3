#!/usr/bin/env bash
# Installs Debian's zookeeper package (3.8: the server's jars in
# /usr/share/java, a JRE by dependency) for peerbench's ZooKeeper peer,
# unless it is there already. Idempotent; peerbench runs it (embedded in
# its binary) when /usr/share/java/zookeeper.jar or java is missing.
# Needs root (or sudo) and Debian's package lists; waits up to 10 minutes
# for another apt-get or dpkg to finish.
set -euo pipefail
if [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null; then
  exit 0
fi
sudo=
if [ "$(id -u)" != 0 ]; then
  sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
apt=($sudo apt-get -o DPkg::Lock::Timeout=600 -q)
if ! apt-cache show zookeeper >/dev/null 2>&1; then
  "${apt[@]}" update
fi
"${apt[@]}" install -y --no-install-recommends zookeeper
