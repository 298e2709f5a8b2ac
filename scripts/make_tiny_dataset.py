"""Write profiles/data/tiny-instruct.jsonl and tests/data/tiny-chat.jsonl (deterministic, stdlib).

    python scripts/make_tiny_dataset.py

The records are small, varied and made up here (no download): arithmetic, unit conversions,
definitions, programming facts, everyday tips and a few text tasks that use the input field.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DEFINITIONS = [
    ("photosynthesis", "Photosynthesis is the process by which plants use sunlight, water and carbon dioxide to make sugar and release oxygen."),
    ("a noun", "A noun is a word that names a person, place, thing or idea."),
    ("a verb", "A verb is a word that describes an action or a state, such as run, think or be."),
    ("gravity", "Gravity is the force that pulls objects with mass toward each other. On Earth it makes things fall to the ground."),
    ("a prime number", "A prime number is a whole number greater than 1 whose only divisors are 1 and itself, such as 2, 3, 5 and 7."),
    ("inflation", "Inflation is the general rise of prices over time, which means the same amount of money buys less."),
    ("a budget", "A budget is a plan for how to spend and save money over a period of time."),
    ("an ecosystem", "An ecosystem is a community of living things together with their environment, such as a forest, a pond or a coral reef."),
    ("evaporation", "Evaporation is the change of a liquid into a gas, like water drying from a puddle on a sunny day."),
    ("a metaphor", "A metaphor describes one thing as if it were another, for example 'time is a thief'."),
    ("democracy", "Democracy is a system of government in which citizens choose their leaders and laws, usually by voting."),
    ("a fraction", "A fraction represents a part of a whole. It is written as one number over another, such as 3/4."),
    ("a habit", "A habit is a behaviour repeated so often that it becomes almost automatic."),
    ("an algorithm", "An algorithm is a finite list of precise steps that solves a problem or performs a task."),
    ("a volcano", "A volcano is an opening in the Earth's crust through which molten rock, ash and gas escape. Over time the erupted material can build a mountain."),
    ("compound interest", "Compound interest is interest earned on both the original amount and on the interest already added. Because the base keeps growing, savings grow faster over time than with simple interest."),
    ("a synonym", "A synonym is a word with the same or nearly the same meaning as another word, like big and large."),
    ("the water cycle", "The water cycle is the continuous movement of water on Earth: water evaporates, condenses into clouds, falls as rain or snow, and flows back to rivers and seas."),
    ("a calorie", "A calorie is a unit of energy. On food labels it measures how much energy the food provides."),
    ("recycling", "Recycling is turning used materials such as paper, glass and metal into new products instead of throwing them away."),
    ("an atom", "An atom is the smallest unit of a chemical element. It has a nucleus of protons and neutrons surrounded by electrons."),
    ("a haiku", "A haiku is a short Japanese poem of three lines, traditionally with five, seven and five syllables."),
    ("a mammal", "A mammal is a warm-blooded animal with hair or fur that feeds its young with milk. Dogs, whales and humans are mammals."),
    ("supply and demand", "Supply and demand describes how prices form: when many people want something that is scarce, its price rises; when there is plenty and little interest, its price falls."),
    ("a thermometer", "A thermometer is an instrument that measures temperature."),
    ("erosion", "Erosion is the slow wearing away of rock and soil by wind, water or ice."),
    ("a comet", "A comet is a small icy body that orbits the Sun. When it comes close to the Sun it heats up and grows a glowing tail."),
    ("an adjective", "An adjective is a word that describes a noun, such as red, tall or happy."),
    ("a password manager", "A password manager is a program that stores your passwords in an encrypted vault, so you can use a long, different password for every site and only remember one."),
    ("a vaccine", "A vaccine trains the immune system to recognise a germ without causing the disease, so the body can fight the real infection faster."),
]

PROGRAMMING = [
    ("What does the len function do in Python?", "len returns the number of items in a container, such as the characters of a string or the elements of a list."),
    ("What is a variable?", "A variable is a name that refers to a value stored in memory, so a program can use and change that value."),
    ("What is the difference between a list and a tuple in Python?", "A list can be changed after it is created, while a tuple cannot. Tuples are often used for fixed groups of values, such as coordinates."),
    ("What does HTML stand for?", "HTML stands for HyperText Markup Language."),
    ("What is a function?", "A function is a named block of code that performs a task. It can take inputs, called arguments, and return a result."),
    ("What is a loop?", "A loop repeats a block of code, either a fixed number of times or while a condition stays true."),
    ("What is Git used for?", "Git is a version control system. It records the history of changes to files, so you can go back to earlier versions and work with others on the same code."),
    ("What is a bug?", "A bug is a mistake in a program that makes it behave differently from what was intended."),
    ("What does SQL stand for?", "SQL stands for Structured Query Language, a language for reading and changing data in relational databases."),
    ("How do you write a comment in Python?", "Start the line with the # character. Everything after it on that line is ignored by Python."),
    ("What is recursion?", "Recursion is when a function calls itself to solve a smaller version of the same problem. It needs a base case that stops the calls."),
    ("What is an API?", "An API, or application programming interface, is a defined way for one program to ask another program for data or actions."),
    ("What is a boolean?", "A boolean is a value that is either true or false."),
    ("What is the time complexity of binary search?", "Binary search takes logarithmic time, O(log n), because it halves the search range at every step."),
    ("What does the return statement do?", "return ends a function and hands a value back to the code that called it."),
    ("What is JSON?", "JSON is a text format for structured data made of objects, arrays, strings, numbers, booleans and null. It is easy for both people and programs to read."),
    ("What is an index in a list?", "An index is the position of an element in a list. In Python the first element has index 0."),
    ("What is a compiler?", "A compiler translates source code written in a programming language into machine code or another lower-level form that a computer can run."),
    ("What does 'immutable' mean?", "An immutable object cannot be changed after it is created. In Python, strings and tuples are immutable."),
    ("What is a dictionary in Python?", "A dictionary maps keys to values. You look up a value by its key, for example ages['ana']."),
    ("Why are unit tests useful?", "Unit tests check small pieces of code automatically. They catch mistakes early and make it safer to change code later, because a broken test shows what stopped working."),
    ("What is an exception?", "An exception is an error signalled while a program runs. It can be caught and handled with try and except in Python."),
    ("What is the difference between == and = in Python?", "= assigns a value to a name, while == compares two values and gives True or False."),
    ("What does a GPU do well?", "A GPU runs many simple calculations at the same time, which makes it fast for graphics and for the matrix arithmetic used to train neural networks."),
    ("What is a string?", "A string is a sequence of characters, such as a word or a sentence."),
]

TIPS = [
    ("Give me a tip for sleeping better.", "Go to bed and wake up at the same time every day, even on weekends."),
    ("How can I save money on groceries?", "Plan your meals for the week and write a shopping list before you go. Buy only what is on the list, compare prices per kilogram, and cook larger batches that you can eat over several days."),
    ("How do I keep a houseplant healthy?", "Put it where it gets the right amount of light for its kind, water it only when the top of the soil is dry, and make sure the pot has a drainage hole."),
    ("What should I pack for a day hike?", "Bring water, a snack, a map or charged phone, sunscreen, a hat, a light jacket and a small first aid kit. Tell someone where you are going."),
    ("How can I focus better while studying?", "Put your phone in another room, work in blocks of about 25 minutes with short breaks, and decide before each block exactly what you want to finish."),
    ("How do I boil an egg?", "Place the egg in boiling water. Cook it for about 7 minutes for a soft yolk or 10 minutes for a hard one, then cool it in cold water."),
    ("How can I reduce food waste at home?", "Store food properly, eat older items first, freeze leftovers, and use vegetable scraps for soup."),
    ("How do I start running?", "Begin with short sessions that mix walking and easy running, three times a week. Increase the running time a little each week, wear comfortable shoes, and rest if something hurts."),
    ("What is a good way to learn new words in a foreign language?", "Learn words in short phrases rather than alone, review them a few times over the following days, and try to use them in sentences of your own."),
    ("How can I stay safe online?", "Use a different strong password for each account, turn on two-factor authentication, keep your software updated, and be careful with links in unexpected messages."),
    ("How do I make a cup of tea?", "Boil fresh water, pour it over the tea bag or leaves, let it steep for three to five minutes, then remove the tea and add milk or lemon if you like."),
    ("How should I prepare for a job interview?", "Read about the company, practise short answers about your experience, prepare two or three questions to ask, and plan your route so you arrive a few minutes early."),
    ("How can I drink more water during the day?", "Keep a bottle on your desk and refill it at fixed times, such as with every meal."),
    ("How do I remove a coffee stain from a shirt?", "Rinse the stain with cold water from the back of the fabric as soon as possible, rub in a little liquid detergent, let it sit for a few minutes, and wash as usual."),
    ("What can I do on a rainy afternoon?", "Read a book, cook something new, sort old photos, play a board game, or call a friend you have not talked to in a while."),
    ("How do I write a polite email asking for help?", "Start with a greeting, say briefly who you are, explain what you need and why, thank the person for their time, and end with your name."),
    ("How can I be more punctual?", "Work out how long things really take, add a buffer of ten minutes, and prepare your bag and clothes the evening before."),
    ("Why should I stretch after exercise?", "Gentle stretching after exercise can help you cool down and keep your muscles flexible."),
    ("How do I keep bread fresh longer?", "Keep it in a bread box or a paper bag at room temperature for a couple of days, and freeze slices you will not eat soon."),
    ("How can I learn to cook?", "Start with a few simple recipes you enjoy, such as pasta, an omelette and a soup. Cook each one several times until you know it well, then change one ingredient at a time to learn how flavours work."),
]

CONVERSIONS = [
    ("kilometres", "miles", 0.621371), ("miles", "kilometres", 1.609344),
    ("kilograms", "pounds", 2.204623), ("pounds", "kilograms", 0.453592),
    ("metres", "feet", 3.280840), ("litres", "US gallons", 0.264172),
    ("centimetres", "inches", 0.393701), ("hours", "minutes", 60.0),
    ("minutes", "seconds", 60.0), ("days", "hours", 24.0),
]

WORDS = ["apple", "river", "window", "garden", "planet", "rocket", "coffee", "pencil", "silver",
         "monkey", "bridge", "yellow", "summer", "forest", "castle", "rabbit", "orange", "guitar"]


def fmt(x: float) -> str:
    return f"{x:.2f}".rstrip("0").rstrip(".")


def instruction_records() -> list[dict]:
    rng = random.Random(20240601)
    out: list[dict] = []
    for _ in range(30):  # arithmetic, short answers
        a, b = rng.randint(2, 99), rng.randint(2, 99)
        op = rng.choice(["+", "-", "*"])
        value = a + b if op == "+" else a - b if op == "-" else a * b
        word = {"+": "plus", "-": "minus", "*": "times"}[op]
        out.append({"instruction": f"What is {a} {word} {b}?", "input": "", "output": str(value)})
    for _ in range(15):  # arithmetic word problems with an explanation
        n, price = rng.randint(2, 12), rng.randint(2, 9)
        item = rng.choice(["apples", "notebooks", "tickets", "pens", "cups of coffee"])
        out.append({
            "instruction": f"If one of the {item} costs {price} dollars, how much do {n} cost?",
            "input": "",
            "output": f"Multiply the number of {item} by the price: {n} x {price} = {n * price}. "
                      f"So {n} {item} cost {n * price} dollars.",
        })
    for _ in range(10):  # percentages
        p, base = rng.choice([5, 10, 15, 20, 25, 50]), rng.randint(2, 40) * 10
        out.append({"instruction": f"What is {p}% of {base}?", "input": "",
                    "output": f"{p}% of {base} is {base * p / 100:g}, because {base} x {p} / 100 = {base * p / 100:g}."})
    for src, dst, factor in CONVERSIONS:  # unit conversions
        for _ in range(3):
            x = rng.randint(1, 50)
            out.append({"instruction": f"Convert {x} {src} to {dst}.", "input": "",
                        "output": f"{x} {src} is about {fmt(x * factor)} {dst}."})
    for c in rng.sample(range(-10, 41), 8):
        out.append({"instruction": f"Convert {c} degrees Celsius to Fahrenheit.", "input": "",
                    "output": f"{c} degrees Celsius is {fmt(c * 9 / 5 + 32)} degrees Fahrenheit "
                              f"(multiply by 9/5 and add 32)."})
    for term, text in DEFINITIONS:
        phrasing = rng.choice(["Define {t}.", "What is {t}?", "Explain {t} in simple words."])
        out.append({"instruction": phrasing.format(t=term), "input": "", "output": text})
    for question, answer in PROGRAMMING:
        out.append({"instruction": question, "input": "", "output": answer})
    for question, answer in TIPS:
        out.append({"instruction": question, "input": "", "output": answer})
    for _ in range(12):  # text tasks using the input field
        word = rng.choice(WORDS)
        out.append({"instruction": "Reverse the letters of the word.", "input": word, "output": word[::-1]})
    for _ in range(12):
        word = rng.choice(WORDS)
        out.append({"instruction": "How many letters does this word have?", "input": word,
                    "output": f"The word '{word}' has {len(word)} letters."})
    for _ in range(12):
        nums = rng.sample(range(1, 100), rng.randint(4, 7))
        out.append({"instruction": "Sort these numbers from smallest to largest.",
                    "input": ", ".join(map(str, nums)), "output": ", ".join(map(str, sorted(nums)))})
    for _ in range(10):
        nums = rng.sample(range(1, 60), rng.randint(3, 5))
        out.append({"instruction": "Add up these numbers.", "input": " + ".join(map(str, nums)),
                    "output": f"The sum is {sum(nums)}."})
    for _ in range(10):
        words = rng.sample(WORDS, 3)
        out.append({"instruction": "Write the words in upper case.", "input": " ".join(words),
                    "output": " ".join(w.upper() for w in words)})
    for _ in range(8):
        word = rng.choice(WORDS)
        vowels = sum(ch in "aeiou" for ch in word)
        out.append({"instruction": "Count the vowels in the word.", "input": word,
                    "output": f"'{word}' has {vowels} vowels."})
    rng.shuffle(out)
    return out


def chat_records() -> list[dict]:
    rng = random.Random(7)
    pairs = [(q, a) for q, a in PROGRAMMING[:8]] + [(q, a) for q, a in TIPS[:8]]
    out: list[dict] = []
    for q, a in pairs:
        messages = [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        if rng.random() < 0.4:
            messages.insert(0, {"role": "system", "content": "You are a helpful, concise assistant."})
        out.append({"messages": messages})
    for _ in range(4):  # two-turn conversations
        a, b = rng.randint(2, 20), rng.randint(2, 20)
        out.append({"messages": [
            {"role": "user", "content": f"What is {a} plus {b}?"},
            {"role": "assistant", "content": str(a + b)},
            {"role": "user", "content": f"And times {b}?"},
            {"role": "assistant", "content": f"{a + b} times {b} is {(a + b) * b}."},
        ]})
    return out


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    write_jsonl(ROOT / "profiles" / "data" / "tiny-instruct.jsonl", instruction_records())
    write_jsonl(ROOT / "tests" / "data" / "tiny-chat.jsonl", chat_records())
