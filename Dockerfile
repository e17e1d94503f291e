# specdeploy operator image, as the chart expects it:
#   docker build -t ghcr.io/specdeploy/specdeploy:0.1.0 .
# Stage 1 builds the specdeploy wheel and its dependencies' wheels, each at the version
# constraints/core.txt pins (the versions `make test` ran: tests/unit/test_dockerfile.py keeps the
# two equal); stage 2 installs exactly that wheel set offline -- the same install `pip install .`
# performs -- into a slim Python with no compiler, no build backend and no pip, and runs it as a
# non-root user. The Helm chart passes the arguments of `specdeploy run` (namespaces, liveness endpoint).

# python:3.11-slim (Python 3.11.16 on Debian trixie) pinned by its multi-arch index digest, so a
# rebuild starts from the same base: the tag moves with every Python and Debian update. Refresh it
# on purpose (docker buildx imagetools inspect python:3.11-slim), then rebuild and test.
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY constraints/core.txt constraints/core.txt
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN python -m pip wheel --no-cache-dir --constraint constraints/core.txt --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    HF_HOME=/tmp/huggingface
COPY --from=build /wheels /wheels
RUN python -m pip install --no-cache-dir --no-index --find-links /wheels specdeploy \
 && rm -rf /wheels \
 && python -m pip uninstall -y pip setuptools wheel \
 && groupadd --system --gid 10001 specdeploy \
 && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /tmp --shell /usr/sbin/nologin specdeploy
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["specdeploy", "run"]
