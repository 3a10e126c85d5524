# An E2B sandbox template from the sandbox image (README.md beside this
# file): the image as it is, with envd also where E2B runs it from.
#
# ENVD_IMAGE is the sandbox image built from the repository's Dockerfile and
# pushed to a registry the build can pull from: E2B's CLI builds with
# `docker build --pull`, which fails on an image that only exists locally.
#   e2b template build --build-arg ENVD_IMAGE=registry.example.com/envd-sandbox:TAG
ARG ENVD_IMAGE=envd-sandbox:latest
FROM ${ENVD_IMAGE}

# E2B's guest starts /usr/bin/envd (systemd, no flags); the image has envd
# in /usr/local/bin, where start-up.sh finds it. E2B's template builder
# puts its own envd binary at /usr/bin/envd when it makes the guest: a
# self-hosted E2B gives it ours (README.md).
RUN ln -sf /usr/local/bin/envd /usr/bin/envd && /usr/bin/envd -version

# Nothing else: E2B ignores CMD (the guest boots systemd, which starts envd),
# and `docker run` of this image still starts start-up.sh, as the image does.
