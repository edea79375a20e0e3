# syntax=docker/dockerfile:1
# fence's image: the slim static binary (-tags fence_slim: no database
# driver) on distroless/static, run as the nonroot user (65532). From the
# repository root (.git is not sent, so the version and commit come in as
# build arguments):
#
#   docker build -t fence --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg COMMIT=$(git rev-parse HEAD) .
#
# As it stands the image runs 'fence serve' in /var/lib/fence (a volume):
# one node on the container's loopback, with dev certificates, for a look
# inside (docker exec … fence ls). A real node takes its addresses and
# certificates as arguments: see packaging/kubernetes.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG TARGETOS TARGETARCH VERSION=dev COMMIT MODIFIED
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false -tags fence_slim \
      -ldflags "-s -w -X github.com/fencehq/fence/internal/buildinfo.version=$VERSION -X github.com/fencehq/fence/internal/buildinfo.commit=$COMMIT -X github.com/fencehq/fence/internal/buildinfo.modified=$MODIFIED" \
      -o /out/fence ./cmd/fence \
 && mkdir /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/fence /usr/local/bin/fence
COPY --from=build --chown=65532:65532 /out/data /var/lib/fence
USER 65532:65532
WORKDIR /var/lib/fence
VOLUME /var/lib/fence
# gRPC (clients), HTTPS (/metrics, /healthz, /readyz), raft (members)
EXPOSE 7300 7301 7302
ENTRYPOINT ["/usr/local/bin/fence"]
CMD ["serve"]
