"""Tools for working on openforge itself: the layer declaration and the architecture map made from it."""
