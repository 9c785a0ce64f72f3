"""The review desk: the web application where a compliance team works through a drop's review set,
records decisions under its own names, and sees only the suppliers it is given (docs/web.md).

``routes`` is the HTTP API (Powertools' APIGatewayHttpResolver) that ``functions/web/app.py`` serves;
``access`` says who may see and decide what, from the authorizer's JWT claims, and guards state changes
(CSRF); ``review`` is the pure arithmetic of a review set (rows, filters, groups, pages); ``render``
turns those into HTML with Jinja2, autoescaped: everything a drop holds is text, never markup.
"""
