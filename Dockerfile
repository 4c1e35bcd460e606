# syntax=docker/dockerfile:1
# One image with all three binaries (ingest, worker, sendhook) on PATH; docker-compose.yml picks
# one per service with `command`. There is no ENTRYPOINT or CMD: say which binary to run, e.g.
#   docker run --rm -e DATABASE_URL=... inbox:dev worker migrate
# The runtime image has no shell, so commands are exec-form (a JSON list); a health check runs the
# binary itself: ingest --probe http://127.0.0.1:9091/readyz (exits 0 on a 2xx).
#
# Base images: the Go image by exact version (go.mod's go line). distroless publishes no version
# tags, only the moving :nonroot and digests; no digest is pinned here because none could be
# checked against a registry where this file was written (an unverified digest is worse than a
# tag). Where a registry answers, pin both by digest:
#   docker buildx imagetools inspect gcr.io/distroless/static-debian12:nonroot
# and write FROM ...:nonroot@sha256:<digest>.

FROM golang:1.26.8-bookworm AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o /out/ ./cmd/ingest ./cmd/worker ./cmd/sendhook

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
USER nonroot:nonroot
EXPOSE 8080 9090 9091
