"""The browser environment's web apps: plain server-rendered HTML (forms, links, no JavaScript
needed) whose state lives in the driver, where the verifier reads it.

Owns: :class:`WebState` and :func:`build_app`. Sections: ``/contact`` and ``/signup`` (forms),
``/shop`` (catalogue, product pages, cart, checkout), ``/search`` + ``/article/{id}`` (search and
navigation, likes), ``/settings`` → ``/settings/profile`` (nested navigation), ``/todo``.
"""

from __future__ import annotations

import copy
import html
from typing import Any

__all__ = ["PRODUCTS", "WebState", "build_app"]

PRODUCTS = [
    {"id": 1, "name": "Blue Mug", "category": "Kitchen", "price": 8.5},
    {"id": 2, "name": "Red Kettle", "category": "Kitchen", "price": 31.0},
    {"id": 3, "name": "Dune", "category": "Books", "price": 12.0},
    {"id": 4, "name": "Emma", "category": "Books", "price": 6.75},
    {"id": 5, "name": "Atlas of Birds", "category": "Books", "price": 24.0},
    {"id": 6, "name": "Desk Lamp", "category": "Home", "price": 19.9},
]
ARTICLES = [
    {"id": 1, "title": "Penguins of the Antarctic", "body": "Emperor penguins breed in winter."},
    {"id": 2, "title": "Desert plants", "body": "Cacti store water."},
    {"id": 3, "title": "Penguin-shaped robots", "body": "Engineers mimic penguin swimming."},
    {"id": 4, "title": "Rivers of Europe", "body": "The Danube crosses ten countries."},
]


class WebState:
    def __init__(self, seed: dict[str, Any] | None = None):
        seed = copy.deepcopy(seed or {})
        self.contacts: list[dict[str, str]] = []
        self.signups: list[dict[str, str]] = []
        self.cart: dict[int, int] = {}
        self.orders: list[dict[str, Any]] = []
        self.likes: dict[int, int] = {}
        self.profile: dict[str, str] = seed.get("profile", {"display_name": "user1", "theme": "light"})
        self.todos: list[dict[str, Any]] = seed.get("todos", [{"text": "pay rent", "done": False},
                                                             {"text": "buy bread", "done": False}])
        self.visits: list[str] = []


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title></head>"
            f"<body><nav><a href='/'>Home</a> | <a href='/shop'>Shop</a> | <a href='/search'>Search</a> | "
            f"<a href='/settings'>Settings</a> | <a href='/todo'>Todo</a> | <a href='/contact'>Contact</a></nav>"
            f"<h1>{html.escape(title)}</h1>{body}</body></html>")


def build_app(st: WebState) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, RedirectResponse
    from starlette.routing import Route

    def page(title: str, body: str) -> HTMLResponse:
        return HTMLResponse(_page(title, body))

    async def form(request: Request) -> dict[str, str]:
        return {k: str(v) for k, v in (await request.form()).items()}

    async def home(request: Request) -> HTMLResponse:
        st.visits.append("/")
        return page("Demo site", "<p>Welcome. Use the links above.</p>")

    async def contact(request: Request) -> HTMLResponse:
        if request.method == "POST":
            f = await form(request)
            if not f.get("name") or not f.get("email"):
                return page("Contact", "<p class='error'>Name and email are required.</p>")
            st.contacts.append(f)
            return page("Thank you", f"<p>Thanks, {html.escape(f['name'])}. We will reply soon.</p>")
        return page("Contact", "<form method='post' action='/contact'>"
                    "<label>Name <input name='name' id='name'></label>"
                    "<label>Email <input name='email' id='email' type='email'></label>"
                    "<label>Message <textarea name='message' id='message'></textarea></label>"
                    "<button type='submit'>Send</button></form>")

    async def signup(request: Request) -> HTMLResponse:
        if request.method == "POST":
            f = await form(request)
            if f.get("agree") != "yes":
                return page("Sign up", "<p class='error'>You must accept the terms.</p>")
            st.signups.append(f)
            return page("Welcome", f"<p>Account {html.escape(f.get('username', ''))} created.</p>")
        return page("Sign up", "<form method='post' action='/signup'>"
                    "<label>Username <input name='username' id='username'></label>"
                    "<fieldset><legend>Plan</legend>"
                    "<label><input type='radio' name='plan' value='free' checked> Free</label>"
                    "<label><input type='radio' name='plan' value='pro'> Pro</label></fieldset>"
                    "<label><input type='checkbox' name='agree' value='yes'> I accept the terms</label>"
                    "<button type='submit'>Create account</button></form>")

    async def shop(request: Request) -> HTMLResponse:
        cat = request.query_params.get("category")
        items = [p for p in PRODUCTS if not cat or p["category"] == cat]
        cats = " ".join(f"<a href='/shop?category={c}'>{c}</a>" for c in sorted({p['category'] for p in PRODUCTS}))
        rows = "".join(f"<li><a href='/product/{p['id']}'>{html.escape(p['name'])}</a> — ${p['price']:.2f}</li>"
                       for p in items)
        return page("Shop", f"<p>Categories: {cats}</p><ul>{rows}</ul><p><a href='/cart'>Cart</a></p>")

    async def product(request: Request) -> HTMLResponse:
        pid = int(request.path_params["id"])
        p = next((p for p in PRODUCTS if p["id"] == pid), None)
        if p is None:
            return HTMLResponse(_page("Not found", "<p>No such product.</p>"), status_code=404)
        return page(p["name"], f"<p>{p['category']}, ${p['price']:.2f}</p>"
                    f"<form method='post' action='/cart/add'><input type='hidden' name='product' value='{pid}'>"
                    "<label>Quantity <input name='qty' id='qty' value='1'></label>"
                    "<button type='submit'>Add to cart</button></form>")

    async def cart_add(request: Request) -> RedirectResponse:
        f = await form(request)
        pid, qty = int(f["product"]), max(1, int(f.get("qty") or 1))
        st.cart[pid] = st.cart.get(pid, 0) + qty
        return RedirectResponse("/cart", status_code=303)

    async def cart(request: Request) -> HTMLResponse:
        rows = "".join(f"<li>{html.escape(next(p['name'] for p in PRODUCTS if p['id'] == k))} × {v}</li>"
                       for k, v in st.cart.items())
        return page("Cart", f"<ul>{rows or '<li>empty</li>'}</ul><form method='post' action='/checkout'>"
                    "<button type='submit'>Checkout</button></form>")

    async def checkout(request: Request) -> HTMLResponse:
        if not st.cart:
            return page("Checkout", "<p class='error'>Your cart is empty.</p>")
        st.orders.append({"items": dict(st.cart)})
        st.cart = {}
        return page("Order placed", f"<p>Order #{len(st.orders)} placed.</p>")

    async def search(request: Request) -> HTMLResponse:
        q = (request.query_params.get("q") or "").strip().lower()
        hits = [a for a in ARTICLES if q and (q in a["title"].lower() or q in a["body"].lower())]
        rows = "".join(f"<li><a href='/article/{a['id']}'>{html.escape(a['title'])}</a></li>" for a in hits)
        return page("Search", "<form method='get' action='/search'><input name='q' id='q'>"
                    f"<button type='submit'>Search</button></form><ul>{rows}</ul>")

    async def article(request: Request) -> HTMLResponse:
        aid = int(request.path_params["id"])
        a = next((a for a in ARTICLES if a["id"] == aid), None)
        if a is None:
            return HTMLResponse(_page("Not found", ""), status_code=404)
        st.visits.append(f"/article/{aid}")
        return page(a["title"], f"<p>{html.escape(a['body'])}</p><p>Likes: {st.likes.get(aid, 0)}</p>"
                    f"<form method='post' action='/article/{aid}/like'><button type='submit'>Like</button></form>")

    async def like(request: Request) -> RedirectResponse:
        aid = int(request.path_params["id"])
        st.likes[aid] = st.likes.get(aid, 0) + 1
        return RedirectResponse(f"/article/{aid}", status_code=303)

    async def settings(request: Request) -> HTMLResponse:
        return page("Settings", "<ul><li><a href='/settings/profile'>Profile</a></li>"
                    "<li><a href='/settings/privacy'>Privacy</a></li></ul>")

    async def profile(request: Request) -> HTMLResponse:
        if request.method == "POST":
            f = await form(request)
            st.profile.update({k: v for k, v in f.items() if k in ("display_name", "theme")})
            return page("Profile saved", "<p>Saved.</p>")
        p = st.profile
        return page("Profile", "<form method='post' action='/settings/profile'>"
                    f"<label>Display name <input name='display_name' id='display_name' value='{html.escape(p['display_name'])}'></label>"
                    "<label>Theme <select name='theme' id='theme'>"
                    + "".join(f"<option{' selected' if p['theme'] == t else ''}>{t}</option>" for t in ("light", "dark"))
                    + "</select></label><button type='submit'>Save</button></form>")

    async def todo(request: Request) -> HTMLResponse:
        if request.method == "POST":
            f = await form(request)
            if f.get("text"):
                st.todos.append({"text": f["text"], "done": False})
            if f.get("done") is not None:
                st.todos[int(f["done"])]["done"] = True
        rows = "".join(f"<li>{'[x]' if t['done'] else '[ ]'} {html.escape(t['text'])} <form method='post' "
                       f"action='/todo' style='display:inline'><input type='hidden' name='done' value='{i}'>"
                       f"<button type='submit'>Done</button></form></li>" for i, t in enumerate(st.todos))
        return page("Todo", f"<ul>{rows}</ul><form method='post' action='/todo'><input name='text' id='text'>"
                    "<button type='submit'>Add</button></form>")

    return Starlette(routes=[
        Route("/", home), Route("/contact", contact, methods=["GET", "POST"]),
        Route("/signup", signup, methods=["GET", "POST"]), Route("/shop", shop),
        Route("/product/{id:int}", product), Route("/cart/add", cart_add, methods=["POST"]), Route("/cart", cart),
        Route("/checkout", checkout, methods=["POST"]), Route("/search", search), Route("/article/{id:int}", article),
        Route("/article/{id:int}/like", like, methods=["POST"]), Route("/settings", settings),
        Route("/settings/profile", profile, methods=["GET", "POST"]), Route("/todo", todo, methods=["GET", "POST"]),
    ])
