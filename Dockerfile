# One image for every service of the stack: workers, Flower and the orchestrator.
#   docker build -t toolfleet .
#   docker run --rm -e TOOLFLEET_REDIS_URL=redis://:PASSWORD@redis-host:6379/0 toolfleet tools
# Configuration comes from TOOLFLEET_* environment variables (see docker-compose.yml and the README).
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# Only what the distribution needs (the README is its long description) and the lock; tests, benchmarks
# and the development extras stay out of the image. The dependencies are the lock's versions, checked
# against its hashes; the package itself goes on top of them without resolving anything again.
WORKDIR /src
COPY pyproject.toml uv.lock README.md ./
COPY workers/ workers/
COPY orchestrator/ orchestrator/
RUN pip install "uv==0.13.9" \
    && uv export --locked --no-emit-project --extra postgres --extra otel --extra s3 -o /tmp/locked.txt \
    && pip install --require-hashes -r /tmp/locked.txt \
    && pip install --no-deps ".[postgres,otel,s3]" \
    && pip uninstall --yes uv \
    && cd / && rm -rf /src /tmp/locked.txt

RUN useradd --create-home --home-dir /home/toolfleet --uid 10001 --user-group --shell /usr/sbin/nologin toolfleet
# The directory artifact store (TOOLFLEET_ARTIFACT_URL=file:///artifacts): a volume mounted here takes
# this owner, so the service's user can write it.
RUN mkdir /artifacts && chown toolfleet:toolfleet /artifacts
USER toolfleet
WORKDIR /home/toolfleet

ENTRYPOINT ["toolfleet"]
CMD ["--help"]
