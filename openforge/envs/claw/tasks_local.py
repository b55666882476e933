"""Claw tasks over files, the shell, git, SQLite and CSV/JSON data (no services needed)."""

from __future__ import annotations

import hashlib

from .credit import Kind
from .spec import ClawSpec, file_has, file_is, gone, intact, json_at, same, sh, sql

GIT = ("git config --global user.name agent && git config --global user.email agent@example.com"
       " && git config --global init.defaultBranch main")
BLOB = "".join(chr(97 + (i * 7) % 26) for i in range(3000))
TEXT = "the cat sat on the mat the dog sat on the log the end\n"

SQL_SETUP = (
    "sqlite3 app.db \"CREATE TABLE users(id INTEGER PRIMARY KEY, name TEXT, email TEXT, active INTEGER);"
    " INSERT INTO users(name,email,active) VALUES ('ann','ann@x.org',1),('ben','ben@x.org',0),"
    "('cy','cy@x.org',1),('di','di@x.org',1),('ed','ed@x.org',0);"
    " CREATE TABLE products(id INTEGER PRIMARY KEY, name TEXT, price REAL);"
    " INSERT INTO products(name,price) VALUES ('bolt',0.5),('nut',0.25);"
    " CREATE TABLE orders(id INTEGER PRIMARY KEY, item TEXT, status TEXT);"
    " INSERT INTO orders(item,status) VALUES ('a','new'),('b','new'),('c','new'),('d','new');\""
)
SALES = "date,country,amount\n2026-01-01,DE,10.5\n2026-01-02,FR,4\n2026-01-03,DE,7.25\n2026-01-04,US,20\n2026-01-05,FR,8.25\n"
PEOPLE = "name,age,city\nAda,36,London\nLin,29,Oslo\nSam,41,Lima\n"

TASKS: list[ClawSpec] = [
    # -- files ---------------------------------------------------------------------------------
    ClawSpec("files-create-hello", "files", "Create a file named hello.txt containing exactly the line: hello world",
             ["printf 'hello world\\n' > hello.txt"], {"hello": file_is("hello.txt", "hello world")}, easy=True),
    ClawSpec("files-append-line", "files", "Append a new last line `done` to todo.txt, keeping the existing lines.",
             ["echo done >> todo.txt"], {"appended": file_is("todo.txt", "buy milk\ncall mum\ndone")},
             files={"todo.txt": "buy milk\ncall mum\n"}, easy=True),
    ClawSpec("files-rename", "files", "Rename draft.txt to final.txt.", ["mv draft.txt final.txt"],
             {"renamed": file_is("final.txt", "version 3 of the essay"), "old_gone": intact(gone("draft.txt"))},
             files={"draft.txt": "version 3 of the essay\n"}, easy=True),
    ClawSpec("files-move-logs", "files", "Move every .log file in the current directory into a new directory logs/.",
             ["mkdir -p logs && mv *.log logs/"],
             {"moved": sh("ls logs | sort | tr '\\n' ' '", "a.log b.log"), "left": intact(gone("a.log", "b.log")),
              "kept": intact(file_is("notes.txt", "keep"))},
             files={"a.log": "1\n", "b.log": "2\n", "notes.txt": "keep\n"}, split="eval"),
    ClawSpec("files-delete-tmp", "files", "Delete every file ending in .tmp anywhere under the current directory; keep all other files.",
             ["find . -name '*.tmp' -type f -delete"],
             {"deleted": sh("find . -name '*.tmp' | wc -l", "0", kind=Kind.EFFECT),
              "kept": intact(file_is("src/main.c", "int main(){}"))},
             files={"x.tmp": "", "src/y.tmp": "", "src/main.c": "int main(){}\n", "a/b/c.tmp": ""}),
    ClawSpec("files-count-lines", "files", "Write the number of lines in data.txt (just the number) to count.txt.",
             ["wc -l < data.txt | tr -d ' ' > count.txt"], {"count": file_is("count.txt", "7")},
             files={"data.txt": "".join(f"row {i}\n" for i in range(7))}),
    ClawSpec("files-replace-word", "files", "In doc.txt replace every occurrence of the word colour with color.",
             ["sed -i 's/colour/color/g' doc.txt"],
             {"replaced": file_is("doc.txt", "The color red.\nA colorful color chart.")},
             files={"doc.txt": "The colour red.\nA colourful colour chart.\n"}),
    ClawSpec("files-concat", "files", "Concatenate part1.txt, part2.txt and part3.txt in that order into all.txt.",
             ["cat part1.txt part2.txt part3.txt > all.txt"], {"concat": file_is("all.txt", "one\ntwo\nthree")},
             files={"part1.txt": "one\n", "part2.txt": "two\n", "part3.txt": "three\n"}, split="eval"),
    # -- shell ---------------------------------------------------------------------------------
    ClawSpec("shell-largest-file", "shell", "Write the name (just the file name) of the largest file in data/ to answer.txt.",
             ["ls -S data | head -1 > answer.txt"], {"answer": file_is("answer.txt", "big.bin")},
             files={"data/small.txt": "x" * 10, "data/big.bin": "x" * 5000, "data/mid.csv": "x" * 900}),
    ClawSpec("shell-sort-unique", "shell", "Write the distinct lines of names.txt, sorted alphabetically, to sorted.txt.",
             ["sort -u names.txt > sorted.txt"], {"sorted": file_is("sorted.txt", "amy\nbob\ncat\nzed")},
             files={"names.txt": "zed\nbob\namy\nbob\ncat\namy\n"}),
    ClawSpec("shell-make-executable", "shell", "Make the script run.sh executable.", ["chmod +x run.sh"],
             {"executable": sh("test -x run.sh", kind=Kind.EFFECT)}, files={"run.sh": "#!/bin/sh\necho ok\n"}, easy=True),
    ClawSpec("shell-find-todo", "shell",
             "Write the relative paths (like src/a.py) of all files under src/ that contain TODO, sorted, one per line, to todos.txt.",
             ["grep -rl TODO src | sort > todos.txt"], {"found": file_is("todos.txt", "src/a.py\nsrc/lib/c.py")},
             files={"src/a.py": "# TODO fix\n", "src/b.py": "print(1)\n", "src/lib/c.py": "x = 1  # TODO\n"}),
    ClawSpec("shell-word-freq", "shell", "Write the most frequent word in text.txt to answer.txt.",
             ["tr ' ' '\\n' < text.txt | grep -v '^$' | sort | uniq -c | sort -rn | head -1 | awk '{print $2}' > answer.txt"],
             {"answer": file_is("answer.txt", "the")}, files={"text.txt": TEXT}, split="eval"),
    ClawSpec("shell-greet-script", "shell",
             "Create an executable script greet.sh that prints `Hello, NAME!` where NAME is its first argument.",
             ["printf '#!/bin/sh\\necho \"Hello, $1!\"\\n' > greet.sh", "chmod +x greet.sh"],
             {"works": sh("./greet.sh Ada", "Hello, Ada!"), "works2": sh("./greet.sh Bo", "Hello, Bo!")}),
    ClawSpec("shell-checksum", "shell", "Write the SHA-256 hex digest of blob.bin (only the hex) to blob.sha256.",
             ["sha256sum blob.bin | cut -d' ' -f1 > blob.sha256"],
             {"digest": file_is("blob.sha256", hashlib.sha256(BLOB.encode()).hexdigest())}, files={"blob.bin": BLOB}),
    # -- git -----------------------------------------------------------------------------------
    ClawSpec("git-init-commit", "git", "Make project/ a git repository and commit all its files with the message `initial`.",
             ["cd project && git init -q && git add -A && git commit -qm initial"],
             {"committed": sh("cd project && git log --format=%s", "initial"),
              "clean": sh("cd project && git status --porcelain", "", kind=Kind.EFFECT),
              "tracked": sh("cd project && git ls-files | sort | tr '\\n' ' '", "README.md app.py")},
             files={"project/README.md": "# app\n", "project/app.py": "print('hi')\n"}, setup=[GIT]),
    ClawSpec("git-branch", "git", "In the repository repo/, create a branch feature/login from main and switch to it.",
             ["cd repo && git checkout -q -b feature/login"],
             {"on_branch": sh("cd repo && git branch --show-current", "feature/login"),
              "from_main": same("cd repo && git rev-parse HEAD", "cd repo && git rev-parse main")},
             setup=[GIT, "mkdir repo && cd repo && git init -q && echo a > a && git add a && git commit -qm first"]),
    ClawSpec("git-commit-change", "git",
             "In repo/, add the line `Usage: run it` at the end of README.md and commit the change with the message `update readme`.",
             ["cd repo && echo 'Usage: run it' >> README.md && git commit -qam 'update readme'"],
             {"message": sh("cd repo && git log -1 --format=%s", "update readme"),
              "content": sh("cd repo && git show HEAD:README.md | tail -1", "Usage: run it"),
              "clean": sh("cd repo && git status --porcelain", "", kind=Kind.EFFECT),
              "two": intact(sh("cd repo && git rev-list --count HEAD", "2"))},
             setup=[GIT, "mkdir repo && cd repo && git init -q && echo '# tool' > README.md && git add . && git commit -qm first"],
             split="eval"),
    ClawSpec("git-restore-file", "git", "In repo/, config.ini has uncommitted edits. Restore it to its last committed version.",
             ["cd repo && git checkout -- config.ini"],
             {"restored": sh("cd repo && git status --porcelain", "", kind=Kind.EFFECT), "content": file_is("repo/config.ini", "debug=false")},
             setup=[GIT, "mkdir repo && cd repo && git init -q && echo debug=false > config.ini && git add . "
                         "&& git commit -qm cfg && echo debug=true > config.ini"]),
    ClawSpec("git-tag", "git", "In repo/, tag the current commit as v1.0.", ["cd repo && git tag v1.0"],
             {"tag": same("cd repo && git rev-parse v1.0^{commit}", "cd repo && git rev-parse HEAD")},
             setup=[GIT, "mkdir repo && cd repo && git init -q && echo 1 > v && git add v && git commit -qm one"], easy=True),
    ClawSpec("git-find-commit", "git",
             "In repo/, find the commit whose message mentions `fix overflow` and write its full hash to answer.txt.",
             ["cd repo && git log --format=%H --grep='fix overflow' > ../answer.txt"],
             {"hash": same("cat answer.txt", "cd repo && git log --format=%H --grep='fix overflow'")},
             setup=[GIT, "mkdir repo && cd repo && git init -q && for m in 'add parser' 'fix overflow in parser' 'docs'; "
                         "do echo \"$m\" >> log && git add log && git commit -qm \"$m\"; done"], split="eval"),
    # -- sqlite --------------------------------------------------------------------------------
    ClawSpec("sqlite-count-active", "sqlite", "Write the number of active users (active = 1) in app.db's users table to answer.txt.",
             ["sqlite3 app.db 'SELECT COUNT(*) FROM users WHERE active=1' > answer.txt"],
             {"count": file_is("answer.txt", "3")}, setup=[SQL_SETUP], easy=True),
    ClawSpec("sqlite-insert", "sqlite", "Insert a product named widget with price 9.99 into the products table of app.db.",
             ["sqlite3 app.db \"INSERT INTO products(name,price) VALUES ('widget',9.99)\""],
             {"inserted": sql("app.db", "SELECT name, price FROM products WHERE name='widget'", [("widget", 9.99)]),
              "others": intact(sql("app.db", "SELECT COUNT(*) FROM products", [(3,)]))}, setup=[SQL_SETUP]),
    ClawSpec("sqlite-update", "sqlite", "In app.db, set the status of the order with id 3 to shipped; leave the other orders alone.",
             ["sqlite3 app.db \"UPDATE orders SET status='shipped' WHERE id=3\""],
             {"shipped": sql("app.db", "SELECT id FROM orders WHERE status='shipped'", [(3,)]),
              "others": intact(sql("app.db", "SELECT COUNT(*) FROM orders WHERE status='new'", [(3,)]))}, setup=[SQL_SETUP],
             split="eval"),
    ClawSpec("sqlite-create-table", "sqlite",
             "Create a SQLite database notes.db with a table notes(id INTEGER PRIMARY KEY, body TEXT) holding two rows with bodies a and b.",
             ["sqlite3 notes.db \"CREATE TABLE notes(id INTEGER PRIMARY KEY, body TEXT); INSERT INTO notes(body) VALUES ('a'),('b');\""],
             {"rows": sql("notes.db", "SELECT body FROM notes ORDER BY body", [("a",), ("b",)])}),
    ClawSpec("sqlite-export-csv", "sqlite", "Export the users table of app.db to users.csv with a header row (id,name,email,active).",
             ["sqlite3 -header -csv app.db 'SELECT id,name,email,active FROM users' > users.csv"],
             {"header": sh("head -1 users.csv | tr -d '\\r'", "id,name,email,active"),
              "rows": sh("tail -n +2 users.csv | wc -l", "5", kind=Kind.FORMAT), "ann": file_has("users.csv", "1,ann,ann@x.org,1")},
             setup=[SQL_SETUP]),
    # -- data ----------------------------------------------------------------------------------
    ClawSpec("csv-sum", "data", "Write the sum of the amount column of sales.csv to total.txt.",
             ["awk -F, 'NR>1{s+=$3} END{print s}' sales.csv > total.txt"],
             {"total": sh("python3 -c \"print(abs(float(open('total.txt').read())-50)<1e-6)\"", "True")},
             files={"sales.csv": SALES}),
    ClawSpec("csv-filter", "data", "Write the rows of sales.csv whose country is DE, with the header row, to de.csv.",
             ["(head -1 sales.csv; grep ',DE,' sales.csv) > de.csv"],
             {"filtered": file_is("de.csv", "date,country,amount\n2026-01-01,DE,10.5\n2026-01-03,DE,7.25")},
             files={"sales.csv": SALES}, split="eval"),
    ClawSpec("json-extract", "data", "Write the value of database.port from config.json to port.txt.",
             ["python3 -c \"import json;print(json.load(open('config.json'))['database']['port'])\" > port.txt"],
             {"port": file_is("port.txt", "5433")},
             files={"config.json": '{"name": "svc", "database": {"host": "db", "port": 5433}, "debug": true}\n'}, easy=True),
    ClawSpec("json-edit", "data", "In settings.json set debug to false; keep every other setting unchanged.",
             ["python3 -c \"import json;d=json.load(open('settings.json'));d['debug']=False;json.dump(d,open('settings.json','w'))\""],
             {"debug": json_at("settings.json", lambda d: d["debug"] is False),
              "kept": intact(json_at("settings.json", lambda d: d["theme"] == "dark" and d["retries"] == 3))},
             files={"settings.json": '{"debug": true, "theme": "dark", "retries": 3}\n'}),
    ClawSpec("csv-to-json", "data",
             "Convert people.csv to people.json: a JSON list of objects with keys name, age (a number) and city.",
             ["python3 -c \"import csv,json;r=[dict(x,age=int(x['age'])) for x in csv.DictReader(open('people.csv'))];"
              "json.dump(r,open('people.json','w'))\""],
             {"converted": json_at("people.json", lambda d: d == [{"name": "Ada", "age": 36, "city": "London"},
                                                                  {"name": "Lin", "age": 29, "city": "Oslo"},
                                                                  {"name": "Sam", "age": 41, "city": "Lima"}])},
             files={"people.csv": PEOPLE}, split="eval"),
    ClawSpec("json-count-done", "data", "Write how many items in items.json have done set to true to answer.txt.",
             ["python3 -c \"import json;print(sum(1 for i in json.load(open('items.json')) if i['done']))\" > answer.txt"],
             {"count": file_is("answer.txt", "2")},
             files={"items.json": '[{"t":"a","done":true},{"t":"b","done":false},{"t":"c","done":true},{"t":"d","done":false}]'}),
]
