# syntax=docker/dockerfile:1
# One image with all three binaries (ingest, worker, sendhook) on PATH; docker-compose.yml picks
# one per service with `command`. There is no ENTRYPOINT or CMD: say which binary to run, e.g.
#   docker run --rm -e DATABASE_URL=... inbox:dev worker migrate
# The runtime image has no shell, so commands are exec-form (a JSON list).

FROM golang:1.26-bookworm AS build
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
