# SPDX-License-Identifier: Apache-2.0
# A stand-in for the redis:7.2-bookworm image of deploy/kubernetes/redis,
# used by scripts/kube-play only where no registry can be reached: Debian
# 12's redis-server (7.0) with the official image's shape: the arguments go
# to redis-server, the redis user is uid 999, the working directory /data.
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
      redis-server redis-tools \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /data && chown 999:999 /data
WORKDIR /data
USER 999:999
ENTRYPOINT ["redis-server"]
