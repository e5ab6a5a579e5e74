"""Only the wheel's layout and tag: it carries the native parser core (connector/_native/*.so, built by the build
backend), a plain shared library with a C ABI and no Python in it, so the package is platform-specific (its files
at the wheel's root, as platlib) but one wheel per platform serves every Python 3."""

from setuptools import Distribution, setup
from setuptools.command.bdist_wheel import bdist_wheel


class BinaryDistribution(Distribution):
    def has_ext_modules(self) -> bool:
        return True


class PlatformWheel(bdist_wheel):
    def get_tag(self) -> tuple[str, str, str]:
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(distclass=BinaryDistribution, cmdclass={"bdist_wheel": PlatformWheel})
