from .simpleautodiff import *

__title__ = "simpleautodiff"
