"""Build the chat prompt set used to distil the default draft model (reproducible, seeded).

Prompts are task templates x topics, plus a few free-standing questions of the kinds users type
into a chat model (facts, arithmetic, code, rewriting). The held-out split uses topics that never
appear in the training split, so the draft's acceptance is measured on unseen subject matter.

    python scripts/build_prompts.py            # writes assets/prompts/{train,heldout}.jsonl
"""

from __future__ import annotations

import json
import random
from pathlib import Path

SEED = 1234
N_TRAIN = 6000
N_HELDOUT = 240
OUT = Path(__file__).resolve().parent.parent / "assets" / "prompts"

TEMPLATES = [
    "Explain {t} to a ten-year-old.",
    "What is {t}?",
    "Give me three interesting facts about {t}.",
    "Write a short poem about {t}.",
    "Write a haiku about {t}.",
    "Summarize the history of {t} in a few sentences.",
    "What are the pros and cons of {t}?",
    "Why is {t} important?",
    "How does {t} work?",
    "Write a short story that involves {t}.",
    "List five key ideas related to {t}.",
    "Describe {t} in one paragraph.",
    "What are common misconceptions about {t}?",
    "How would you teach {t} to a beginner?",
    "Write a tweet about {t}.",
    "Give me a fun quiz question about {t}, with the answer.",
    "What questions should I ask an expert on {t}?",
    "Compare {t} with something from everyday life.",
    "Write a product description inspired by {t}.",
    "What is the future of {t}?",
    "Can you give me a simple example of {t}?",
    "Write an email to a friend recommending they learn about {t}.",
    "What are the main steps involved in {t}?",
    "Tell me a joke about {t}.",
    "What skills do I need to get started with {t}?",
    "Write a motivational message that mentions {t}.",
    "Describe a typical day for someone who works with {t}.",
    "In two sentences, what is {t}?",
    "What books or resources would you suggest for learning about {t}?",
    "What is the difference between {t} and {u}?",
    "How are {t} and {u} related?",
    "Write a dialogue between two friends discussing {t}.",
    "Give me tips for {t}.",
    "What are the environmental effects of {t}?",
    "Write a limerick about {t}.",
    "Explain {t} using an analogy.",
    "What would happen if {t} disappeared tomorrow?",
    "Create a short lesson plan about {t}.",
    "Write the opening paragraph of an essay about {t}.",
    "What are three questions people often ask about {t}? Answer them briefly.",
]

TOPICS = """photosynthesis; black holes; the water cycle; volcanoes; the Roman Empire; the French Revolution;
machine learning; neural networks; the internet; electricity; magnets; gravity; climate change; recycling;
the human heart; the immune system; sleep; meditation; coffee; tea; chocolate; bread baking; gardening;
composting; bees; dolphins; elephants; penguins; dinosaurs; the Moon; Mars; the Sun; comets; rainbows;
thunderstorms; earthquakes; the ocean tides; coral reefs; rainforests; deserts; mountains; rivers;
the Great Wall of China; the pyramids of Egypt; ancient Greece; democracy; taxes; inflation; money;
banks; the stock market; cryptocurrency; startups; marketing; teamwork; leadership; public speaking;
time management; learning a new language; chess; soccer; basketball; the Olympic Games; running;
swimming; cycling; yoga; healthy eating; vitamins; vaccines; antibiotics; DNA; evolution; cells;
atoms; chemical reactions; the periodic table; renewable energy; solar panels; wind turbines;
electric cars; trains; airplanes; rockets; satellites; GPS; smartphones; computers; programming;
Python programming; databases; cybersecurity; passwords; video games; music theory; the piano;
the guitar; jazz; classical music; painting; photography; movies; theater; poetry; novels; libraries;
museums; cooking pasta; pizza; sushi; vegetarian diets; friendship; kindness; happiness; stress;
exercise; walking; cities; villages; architecture; bridges; skyscrapers; roads; traffic; bicycles;
the printing press; the telephone; the light bulb; writing systems; mathematics; prime numbers;
fractions; geometry; probability; statistics; algebra; calculus; maps; weather forecasting; clouds;
snow; winter; summer holidays; camping; hiking; birds; cats; dogs; horses; fish; trees; flowers;
mushrooms; insects; spiders; the human brain; memory; dreams; emotions; robots; artificial
intelligence; space exploration; the International Space Station; oceans; plastic pollution; clean
water; farming; wheat; rice; potatoes; apples; honey; salt; sugar; glass; steel; wood; paper; cotton;
fashion; shoes; recycling electronics; solar system; stars; galaxies; light; sound; heat; friction;
volunteering; job interviews; writing a resume; saving money; budgeting; online shopping; social media;
news; journalism; history; archaeology; languages; grammar; punctuation; spelling; handwriting;
board games; puzzles; magic tricks; circuses; zoos; national parks; islands; lighthouses; castles;
knights; pirates; vikings; samurai; the Renaissance; the Industrial Revolution; steam engines;
clocks; calendars; the seasons; birthdays; holidays; weddings; family traditions; grandparents;
babies; schools; teachers; homework; exams; universities; scientists; inventors; doctors; nurses;
firefighters; farmers; chefs; pilots; astronauts; artists; musicians; writers""".replace("\n", " ")

FREE = [
    "What is the capital of {c}?",
    "Where is {c} located?",
    "What language is spoken in {c}?",
    "Tell me about the culture of {c}.",
    "What food is {c} famous for?",
    "What should a tourist see in {c}?",
]
COUNTRIES = """France; Germany; Italy; Spain; Portugal; Japan; China; India; Brazil; Argentina; Canada;
Mexico; Egypt; Kenya; Nigeria; Australia; New Zealand; Norway; Sweden; Finland; Greece; Turkey;
Peru; Chile; Vietnam; Thailand; Indonesia; Morocco; Ireland; Poland""".replace("\n", " ")

MATH = [
    "What is {a} plus {b}?",
    "What is {a} times {b}?",
    "What is {a} minus {b}?",
    "If I have {a} apples and give away {b}, how many do I have left?",
    "A train travels {a} km in {b} hours. What is its average speed?",
    "Is {a} an even or an odd number?",
    "What is {a} divided by 2?",
]
CODE = [
    "Write a Python function that {x}.",
    "How do I {x} in Python?",
    "Explain how to {x} in JavaScript.",
]
CODE_TASKS = """reverses a string; checks if a number is prime; sorts a list of numbers; counts the words in a
sentence; reads a text file; computes the factorial of a number; finds the largest item in a list;
removes duplicates from a list; converts Celsius to Fahrenheit; checks if a word is a palindrome;
merges two dictionaries; computes the average of a list; generates the Fibonacci sequence; counts
vowels in a string; flattens a nested list""".replace("\n", " ")
REWRITE = [
    'Rewrite this sentence to sound more formal: "{s}"',
    'Translate into simple English: "{s}"',
    'Fix the grammar: "{s}"',
    'Make this sentence more exciting: "{s}"',
    'Summarize in five words: "{s}"',
]
SENTENCES = [
    "we goes to the park every days",
    "the meeting is moved to tomorrow because of the rain",
    "i cant find my keys anywhere",
    "the cat sat on the mat and looked at the bird",
    "our team finished the project two weeks early",
    "he dont like vegetables but he eat them",
    "the weather was nice so we had a picnic",
    "she is learning to play the violin",
    "the shop closes at five on sundays",
    "they builded a small house near the lake",
]


def split_list(text: str) -> list[str]:
    return [t.strip() for t in text.split(";") if t.strip()]


def build() -> tuple[list[dict], list[dict]]:
    rng = random.Random(SEED)
    topics = split_list(TOPICS)
    rng.shuffle(topics)
    n_held_topics = max(20, len(topics) // 10)
    held_topics, train_topics = topics[:n_held_topics], topics[n_held_topics:]
    countries = split_list(COUNTRIES)
    code_tasks = split_list(CODE_TASKS)

    def make(pool: list[str], r: random.Random, kind_bias: float) -> str:
        x = r.random()
        if x < kind_bias:
            t, u = r.sample(pool, 2)
            return r.choice(TEMPLATES).format(t=t, u=u)
        if x < kind_bias + 0.05:
            return r.choice(FREE).format(c=r.choice(countries))
        if x < kind_bias + 0.10:
            return r.choice(MATH).format(a=r.randint(2, 400), b=r.randint(2, 60))
        if x < kind_bias + 0.15:
            return r.choice(CODE).format(x=r.choice(code_tasks))
        return r.choice(REWRITE).format(s=r.choice(SENTENCES))

    def collect(pool: list[str], n: int, r: random.Random, exclude: set[str]) -> list[str]:
        out: list[str] = []
        seen = set(exclude)
        while len(out) < n:
            p = make(pool, r, 0.8)
            if p not in seen:
                seen.add(p)
                out.append(p)
        return out

    train = collect(train_topics, N_TRAIN, random.Random(SEED + 1), set())
    # Held-out prompts: template prompts only use held-out topics; the few free-standing ones
    # (countries, arithmetic, code, rewriting) are excluded from training by exact text.
    held = collect(held_topics, N_HELDOUT, random.Random(SEED + 2), set(train))
    return (
        [{"id": f"train-{i:05d}", "prompt": p} for i, p in enumerate(train)],
        [{"id": f"heldout-{i:04d}", "prompt": p} for i, p in enumerate(held)],
    )


def main() -> None:
    train, held = build()
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rows in (("train", train), ("heldout", held)):
        with open(OUT / f"{name}.jsonl", "w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        print(f"wrote {len(rows)} prompts to {OUT / (name + '.jsonl')}")


if __name__ == "__main__":
    main()
