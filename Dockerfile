# The controller image (entrypoint `kubedl-py`; the Deployment's args start with `controller`), also used by
# `make e2e-kind` to run the e2e job programs (examples/ is copied to /app/examples). Runs as uid/gid 65532,
# the ids the rendered Deployment's securityContext asks for.
#
#   make image                                          # picks docker or podman, tags kubedl-py:<version>
#   docker build -t kubedl-py:0.1.0 .                   # the same by hand (python:3.11-slim base)
#   docker build --build-arg WITH_TORCH=1 -t kubedl-py:e2e .    # + PyTorch CPU for the DDP e2e scenarios
#   podman build --network host --build-arg BASE=localhost/kubedl-py-base:bookworm -t kubedl-py:0.1.0 .
#       (make image adds what podman needs on this project's machines: runc, ulimits, the host's CA bundle)
#
# BASE is any image with Python 3.11+ as `python3` (with the venv module) and a POSIX shell: the official
# python:3.11-slim by default, or the Debian bookworm image `make image` builds with debootstrap where no
# registry can be reached (kubedl_local/image.py). The steps below use nothing else (no pip, useradd or
# apt from the base), so they run unchanged on both.
ARG BASE=python:3.11-slim

# Build stage: kubedl-py and its dependencies in a venv at /opt/kubedl-py; the final stage takes only the venv.
FROM ${BASE} AS build
# make image removes the untagged leftovers of its earlier builds by this label (kubedl_local/image.py)
LABEL io.kubedl-py.image=build-stage
ARG WITH_TORCH=0
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
RUN python3 -m venv /opt/kubedl-py
WORKDIR /src
# The dependencies first, read from pyproject.toml, in their own layer: editing the code does not
# download them again. Then the build backend, so the install of the project needs no isolated build env.
COPY pyproject.toml ./
RUN /opt/kubedl-py/bin/python -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); \
        print("\n".join(p["build-system"]["requires"] + p["project"]["dependencies"]))' > /tmp/requirements.txt \
    && /opt/kubedl-py/bin/pip install -r /tmp/requirements.txt \
    && if [ "$WITH_TORCH" = "1" ]; then \
        /opt/kubedl-py/bin/pip install 'torch==2.13.0' --index-url https://download.pytorch.org/whl/cpu; fi
COPY README.md ./
COPY kubedl_py ./kubedl_py
# The product only: kubedl_py/ is the whole of it; the local clusters are the top-level kubedl_local/ (the `local`
# extra, packaging/kubedl-py-local), neither copied nor installed here, nor their dependencies (docs/architecture.md,
# Packaging).
# The controller never installs anything: the build tools (pip, setuptools, wheel: 24 MB) stay behind.
RUN /opt/kubedl-py/bin/pip install --no-build-isolation . \
    && /opt/kubedl-py/bin/pip uninstall --yes setuptools wheel pip \
    && /opt/kubedl-py/bin/kubedl-py --help > /dev/null
# The user by appending to /etc/passwd and /etc/group (the Debian base may have no useradd), here so that the
# final stage runs nothing: what a build mounts into RUN steps (podman: the host's CA bundle) leaves no trace.
RUN echo 'kubedl:x:65532:65532:kubedl-py:/nonexistent:/usr/sbin/nologin' >> /etc/passwd \
    && echo 'kubedl:x:65532:' >> /etc/group

FROM ${BASE}
LABEL io.kubedl-py.image=controller
ENV PATH=/opt/kubedl-py/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
COPY --from=build /etc/passwd /etc/group /etc/
COPY --from=build /opt/kubedl-py /opt/kubedl-py
WORKDIR /app
COPY examples ./examples

USER 65532:65532
# The Deployment passes the subcommand (`controller ...`) as args, so the entrypoint is the bare command.
ENTRYPOINT ["kubedl-py"]
