"""The desktop environment's X applications (Tk): a text editor, a form and a counter.

Run as ``python apps.py editor|form|counter --state FILE [--text INIT]`` on the driver's side of an
Xvfb display (the sandboxed agent sees the display, never the state file). Each app writes its
state as JSON to ``--state`` when the user saves / submits / finishes, which the verifier reads.
On SIGUSR1 the app settles: it handles every input event that reached the display before the signal
(Tk's ``update`` makes an X round trip first), then writes ``--state`` + ``.settled`` (a counter), so
the verifier never reads the state while the agent's last key press still waits in the app's queue.

Keyboard paths (what the reference solutions use): editor — Ctrl+S saves, Ctrl+/ selects all,
Delete deletes the selection; form — Tab moves between fields, Space toggles the checkbox / picks a
radio button, Return submits; counter — ``+`` increments, Return finishes.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys


def _write(path: str, data: dict) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def editor(root, state: str, text: str) -> None:
    import tkinter as tk

    root.title("openforge editor")
    box = tk.Text(root, width=60, height=15, undo=True)
    box.insert("1.0", text)
    box.pack(fill="both", expand=True)
    saves = {"n": 0}

    def save(*_a: object) -> str:
        saves["n"] += 1
        _write(state, {"text": box.get("1.0", "end-1c"), "saves": saves["n"]})
        status.config(text=f"saved ({saves['n']})")
        return "break"

    tk.Button(root, text="Save", command=save).pack(side="left")
    status = tk.Label(root, text="not saved")
    status.pack(side="left")
    root.bind_all("<Control-s>", save)
    box.focus_set()


def form(root, state: str, text: str) -> None:
    import tkinter as tk

    root.title("openforge form")
    name, email = tk.StringVar(), tk.StringVar()
    sub, size = tk.IntVar(value=0), tk.StringVar(value="small")
    tk.Label(root, text="Name").grid(row=0, column=0)
    e1 = tk.Entry(root, textvariable=name)
    e1.grid(row=0, column=1)
    tk.Label(root, text="Email").grid(row=1, column=0)
    tk.Entry(root, textvariable=email).grid(row=1, column=1)
    cb = tk.Checkbutton(root, text="Subscribe", variable=sub, takefocus=1)
    cb.grid(row=2, column=1, sticky="w")
    cb.bind("<space>", lambda _e: (cb.invoke(), "break")[1])  # not every Tk build binds Space on X11
    tk.Radiobutton(root, text="Small", variable=size, value="small").grid(row=3, column=1, sticky="w")
    tk.Radiobutton(root, text="Large", variable=size, value="large").grid(row=4, column=1, sticky="w")
    count = {"n": 0}

    def submit(*_a: object) -> str:
        count["n"] += 1
        _write(state, {"name": name.get(), "email": email.get(), "subscribe": bool(sub.get()), "size": size.get(),
                       "submitted": count["n"]})
        return "break"

    tk.Button(root, text="Submit", command=submit).grid(row=5, column=1)
    root.bind_all("<Return>", submit)
    cb.bind("<Return>", submit)  # Tk's Checkbutton class binding would toggle it on Return first
    e1.focus_set()


def counter(root, state: str, text: str) -> None:
    import tkinter as tk

    root.title("openforge counter")
    value = {"n": 0}
    label = tk.Label(root, text="0", font=("TkDefaultFont", 32))
    label.pack()

    def inc(*_a: object) -> None:
        value["n"] += 1
        label.config(text=str(value["n"]))

    def done(*_a: object) -> None:
        _write(state, {"count": value["n"], "done": True})

    tk.Button(root, text="+", command=inc).pack(side="left")
    tk.Button(root, text="Done", command=done).pack(side="left")
    root.bind_all("<plus>", inc)
    root.bind_all("<Return>", done)
    root.focus_force()


APPS = {"editor": editor, "form": form, "counter": counter}


def main(argv: list[str]) -> None:
    import tkinter as tk

    p = argparse.ArgumentParser()
    p.add_argument("app", choices=sorted(APPS))
    p.add_argument("--state", required=True)
    p.add_argument("--text", default="")
    a = p.parse_args(argv)
    settled = {"n": 0}

    def settle() -> None:
        root.update()  # an X round trip, then every event already queued: the input sent before the signal
        settled["n"] += 1
        _write(a.state + ".settled", {"n": settled["n"]})

    root = tk.Tk()
    signal.signal(signal.SIGUSR1, lambda *_: root.after(0, settle))  # before the window shows: never the default kill
    root.geometry("+0+0")
    APPS[a.app](root, a.state, a.text)
    root.mainloop()


if __name__ == "__main__":
    main(sys.argv[1:])
