# The sandbox image: envd, start-up.sh, Jupyter with its kernels and the data
# stack, installed by the same scripts/install-deps.sh that CI runs.
#
#   docker build --build-arg ENVD_COMMIT=$(git rev-parse --short=12 HEAD) -t envd-sandbox .
#   docker run --rm -p 49983:49983 -p 49999:49999 envd-sandbox

# --- build: a static envd ----------------------------------------------------
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY cmd/ cmd/
COPY gen/ gen/
COPY internal/ internal/
COPY client/ client/
# The public packages at the module's root (internal/ and client/ import them).
COPY backoff/ backoff/
COPY buildinfo/ buildinfo/
COPY relay/ relay/
COPY wirecodec/ wirecodec/
# The commit the binaries report (envd -version, -commit): the build context
# has no .git for Go to read it from.
ARG ENVD_COMMIT=
RUN ldflags="-s -w -X github.com/envd-dev/envd/buildinfo.commit=${ENVD_COMMIT}" \
	&& CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "$ldflags" -o /out/envd ./cmd/envd \
	&& CGO_ENABLED=0 go build -buildvcs=false -trimpath -ldflags "$ldflags" -o /out/envctl ./cmd/envctl

# --- the sandbox -------------------------------------------------------------
FROM debian:bookworm
# The same installer CI runs; the sandbox needs no Go (it gets a built envd)
# and no test packages. It also builds what kernels would build on first use;
# the Java kernel's agent is prebuilt from the source envd embeds.
COPY scripts/install-deps.sh /opt/envd/scripts/install-deps.sh
COPY internal/jupyter/startup/files/python/envd_java_kernel/EnvdJShell.java \
	/opt/envd/internal/jupyter/startup/files/python/envd_java_kernel/EnvdJShell.java
RUN ENVD_INSTALL_FULL=1 ENVD_SKIP_COMPAT=1 ENVD_SKIP_GO=1 /opt/envd/scripts/install-deps.sh \
	&& rm -rf /var/lib/apt/lists/* /root/.npm
COPY --from=build /out/envd /out/envctl /usr/local/bin/
COPY start-up.sh /usr/local/bin/start-up.sh
# The Python environment install-deps.sh creates comes first for every
# process (envd adds it for its commands and kernels itself; this is for
# `docker exec`); /etc/profile.d/envd-python.sh keeps it first in login
# shells. R_LIBS: install.packages writes to the site library user owns.
ENV PATH=/opt/envd-python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	VIRTUAL_ENV=/opt/envd-python \
	R_LIBS=/usr/local/lib/R/site-library \
	LANG=C.UTF-8
WORKDIR /home/user
EXPOSE 49983 49999
STOPSIGNAL SIGTERM
CMD ["/usr/local/bin/start-up.sh"]
