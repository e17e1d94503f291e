# specdeploy operator image.
#   docker build -t specdeploy:0.1.0 .
# Stage 1 builds the specdeploy wheel (and the wheels of its dependencies); stage 2 installs
# exactly that wheel set offline -- the same install `pip install .` performs -- into a slim
# Python with no compiler, no build backend and no pip, and runs it as a non-root user.
# The Helm chart passes the arguments of `specdeploy run` (namespaces, liveness endpoint).

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator/ operator/
RUN python -m pip wheel --no-cache-dir --wheel-dir /wheels .

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
