# The controller image (entrypoint `kubedl-py`; the Deployment's args start with `controller`), also used by
# `make e2e-kind` to run the e2e job programs (examples/ is copied to /app/examples). Slim Python base, runs as
# a non-root user (uid 65532, the uid the rendered Deployment's securityContext asks for).
#
#   docker build -t kubedl-py:0.1.0 .
#   docker build --build-arg WITH_TORCH=1 -t kubedl-py:e2e .    # + PyTorch CPU for the DDP e2e scenarios
FROM python:3.11-slim

ARG WITH_TORCH=0
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app
COPY pyproject.toml README.md ./
COPY kubedl_py ./kubedl_py
RUN pip install . \
    && if [ "$WITH_TORCH" = "1" ]; then pip install 'torch==2.13.0' --index-url https://download.pytorch.org/whl/cpu; fi \
    && useradd --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin kubedl
COPY examples ./examples

USER 65532:65532
# The Deployment passes the subcommand (`controller ...`) as args, so the entrypoint is the bare command.
ENTRYPOINT ["kubedl-py"]
