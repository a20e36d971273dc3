"""WhoDunIt: a small deterministic murder mystery written with the OpenReward SDK.

Every case is generated from a string seed, so a task spec is just ``{"case_id", "seed"}`` and the
same task always yields the same case. Each case is solvable by reasoning over two clues:

- the crime scene holds a trace that matches a personal trait shared by exactly two suspects
  (the culprit and a decoy), which interviews reveal;
- one location has a witness who confirms everyone who really was there; the decoy's alibi is
  confirmed, the culprit's cannot be.

Investigation tools return ``reward=None``; ``accuse`` ends the episode with reward 1.0 or 0.0.

Run a server: ``python examples/environments/whodunit.py 8080``.

>>> case = generate_case("whodunit/train/0")
>>> case == generate_case("whodunit/train/0")
True
>>> sum(s.trait == case.culprit.trait for s in case.suspects)
2
"""

from __future__ import annotations

import random
import sys
from dataclasses import dataclass
from pathlib import Path

from openreward.environments import Server, TextBlock, ToolOutput, tool
from pydantic import BaseModel, Field

sys.path.insert(0, str(Path(__file__).resolve().parent))
from env_splits import TrainTestEnvironment  # noqa: E402

__all__ = ["WhoDunIt", "Case", "Suspect", "generate_case", "TASKS_PER_SPLIT"]

TASKS_PER_SPLIT = {"train": 50, "test": 10}
SUSPECTS_PER_CASE = 5
ALIBI_LOCATIONS_PER_CASE = 3
CRIME_WINDOW = "between 9 and 10 pm"

_FIRST_NAMES = (
    "Ada",
    "Basil",
    "Clara",
    "Desmond",
    "Edith",
    "Felix",
    "Greta",
    "Hugo",
    "Iris",
    "Jasper",
    "Lydia",
    "Magnus",
    "Nora",
    "Oscar",
    "Petra",
    "Rupert",
)
_SURNAMES = (
    "Ashdown",
    "Blackwood",
    "Crane",
    "Drummond",
    "Everly",
    "Fairfax",
    "Grimsby",
    "Holloway",
    "Ingram",
    "Kestrel",
    "Lockhart",
    "Marlowe",
    "Norcross",
    "Pemberton",
    "Quill",
    "Ravensworth",
)
_OCCUPATIONS = (
    "butler",
    "gardener",
    "cook",
    "chauffeur",
    "governess",
    "retired colonel",
    "art dealer",
    "family doctor",
    "solicitor",
    "heiress",
    "opera singer",
    "librarian",
)
# trait shown in interviews -> trace it leaves at a crime scene
_TRAITS = {
    "smokes thin cigars": "the stub of a thin cigar",
    "wears lavender perfume": "a faint smell of lavender perfume",
    "walks with a silver-tipped cane": "small round dents from the tip of a cane",
    "wears muddy riding boots": "muddy prints of riding boots",
    "is always knitting with red wool": "a strand of red knitting wool",
    "chews peppermint gum": "a wad of peppermint gum",
    "has ink-stained fingers": "ink smudges on the door handle",
    "wears a heavy signet ring": "a scratch shaped like a signet ring's crest",
}
_LOCATIONS = ("library", "conservatory", "kitchen", "ballroom", "study", "garden", "billiard room", "wine cellar")
_WITNESSES = ("the housekeeper", "the night porter", "the stable boy", "the maid")
_WEAPONS = ("a candlestick", "a length of rope", "a lead pipe", "a dagger", "a revolver", "a spanner")
_RED_HERRINGS = (
    "a torn theatre ticket",
    "an overturned chair",
    "a half-finished cup of tea",
    "a dog-eared railway timetable",
    "a vase of wilting roses",
)


@dataclass(frozen=True)
class Suspect:
    name: str
    occupation: str
    trait: str
    alibi_location: str


@dataclass(frozen=True)
class Case:
    victim: str
    manor: str
    crime_scene: str
    weapon: str
    suspects: tuple[Suspect, ...]
    culprit_name: str
    witnessed_location: str
    witness: str
    red_herrings: dict[str, str]  # location -> irrelevant detail

    @property
    def culprit(self) -> Suspect:
        return next(s for s in self.suspects if s.name == self.culprit_name)

    @property
    def locations(self) -> tuple[str, ...]:
        alibis = sorted({s.alibi_location for s in self.suspects} | {self.witnessed_location})
        return (self.crime_scene, *alibis)


def generate_case(seed: str) -> Case:
    """Build the case for `seed`; equal seeds give equal cases on every platform and Python run."""
    rng = random.Random(seed)  # str seeds are hashed with SHA-512: stable across processes
    names = _distinct_names(rng, SUSPECTS_PER_CASE + 1)
    victim, suspect_names = names[0], names[1:]
    crime_scene, *alibi_locations = rng.sample(_LOCATIONS, 1 + ALIBI_LOCATIONS_PER_CASE)
    witnessed_location = alibi_locations[0]
    unwitnessed = alibi_locations[1:]

    shared_trait, *other_traits = rng.sample(sorted(_TRAITS), SUSPECTS_PER_CASE - 1)
    culprit_i, decoy_i = rng.sample(range(SUSPECTS_PER_CASE), 2)
    occupations = rng.sample(_OCCUPATIONS, SUSPECTS_PER_CASE)
    suspects = []
    for i, name in enumerate(suspect_names):
        if i == culprit_i:
            trait, where = shared_trait, rng.choice(unwitnessed)
        elif i == decoy_i:
            trait, where = shared_trait, witnessed_location
        else:
            trait, where = other_traits.pop(), rng.choice(alibi_locations)
        suspects.append(Suspect(name=name, occupation=occupations[i], trait=trait, alibi_location=where))

    herrings = rng.sample(_RED_HERRINGS, ALIBI_LOCATIONS_PER_CASE)
    return Case(
        victim=victim,
        manor=f"{rng.choice(_SURNAMES)} Manor",
        crime_scene=crime_scene,
        weapon=rng.choice(_WEAPONS),
        suspects=tuple(suspects),
        culprit_name=suspect_names[culprit_i],
        witnessed_location=witnessed_location,
        witness=rng.choice(_WITNESSES),
        red_herrings=dict(zip(alibi_locations, herrings)),
    )


def _distinct_names(rng: random.Random, count: int) -> list[str]:
    firsts = rng.sample(_FIRST_NAMES, count)
    lasts = rng.sample(_SURNAMES, count)
    return [f"{first} {last}" for first, last in zip(firsts, lasts)]


class SuspectArgs(BaseModel):
    suspect: str = Field(description="The suspect's full name, e.g. 'Ada Ashdown'.")


class LocationArgs(BaseModel):
    location: str = Field(description="A location in the manor, as listed in the case briefing.")


class WhoDunIt(TrainTestEnvironment):
    """Solve a country-house murder: interview suspects, inspect locations, then accuse one suspect."""

    tasks_per_split = TASKS_PER_SPLIT

    def __init__(self, task_spec: dict, secrets: dict[str, str] | None = None) -> None:
        super().__init__(task_spec, secrets or {})
        if not isinstance(task_spec.get("seed"), str):
            raise ValueError(f"WhoDunIt task_spec needs a string 'seed', got {task_spec!r}")
        self.case = generate_case(task_spec["seed"])

    @classmethod
    def task(cls, split: str, index: int) -> dict:
        return {"case_id": f"{split}-{index:03d}", "seed": f"whodunit/{split}/{index}"}

    def get_prompt(self) -> list[TextBlock]:
        case = self.case
        names = ", ".join(s.name for s in case.suspects)
        places = ", ".join(case.locations)
        text = (
            f"{case.victim} was found dead in the {case.crime_scene} of {case.manor}, killed {CRIME_WINDOW} "
            f"with {case.weapon}.\n"
            f"Suspects: {names}.\n"
            f"Locations you can inspect: {places}.\n"
            "Investigate with the tools (list_suspects, interview, inspect). Exactly one suspect is guilty. "
            "When you are sure, call accuse with the culprit's full name: you get a single accusation."
        )
        return [TextBlock(text=text)]

    @tool
    def list_suspects(self) -> ToolOutput:
        """List the suspects with their occupations."""
        lines = [f"- {s.name}, the {s.occupation}" for s in self.case.suspects]
        return _text("\n".join(lines))

    @tool
    def interview(self, args: SuspectArgs) -> ToolOutput:
        """Interview a suspect about where they were at the time of the murder."""
        suspect = self._find(args.suspect)
        if suspect is None:
            return _text(self._unknown_suspect(args.suspect))
        return _text(
            f'{suspect.name}, the {suspect.occupation}, says: "{CRIME_WINDOW.capitalize()} I was in the '
            f'{suspect.alibi_location}." During the interview you notice that {suspect.name} {suspect.trait}.'
        )

    @tool
    def inspect(self, args: LocationArgs) -> ToolOutput:
        """Inspect a location in the manor for clues and witnesses."""
        case = self.case
        where = args.location.strip().lower().removeprefix("the ")
        if where == case.crime_scene:
            trace = _TRAITS[case.culprit.trait]
            return _text(f"The {where} is the crime scene. Near the body you find {trace}.")
        if where not in case.red_herrings:
            return _text(f"There is no location called {args.location!r}. Locations: {', '.join(case.locations)}.")
        found = f"In the {where} you find {case.red_herrings[where]}."
        if where != case.witnessed_location:
            return _text(f"{found} Nobody can say who was here {CRIME_WINDOW}.")
        seen = [s.name for s in case.suspects if s.alibi_location == where]
        return _text(
            f"{found} {case.witness.capitalize()} was here all evening and confirms that exactly these suspects "
            f"were in the {where} {CRIME_WINDOW}: {', '.join(seen)}."
        )

    @tool(exclusive=True)
    def accuse(self, args: SuspectArgs) -> ToolOutput:
        """Accuse a suspect of the murder. This ends the investigation; you get one accusation."""
        suspect = self._find(args.suspect)
        if suspect is None:
            return _text(self._unknown_suspect(args.suspect) + " No accusation was made.")
        solved = suspect.name == self.case.culprit_name
        verdict = "Correct" if solved else f"Wrong. The culprit was {self.case.culprit_name}"
        return ToolOutput(
            blocks=[TextBlock(text=f"You accuse {suspect.name}. {verdict}.")],
            metadata={"accused": suspect.name, "culprit": self.case.culprit_name},
            reward=1.0 if solved else 0.0,
            finished=True,
        )

    def _find(self, query: str) -> Suspect | None:
        """Match a full name, or a first name or surname that names exactly one suspect (case-insensitive)."""
        wanted = " ".join(query.split()).casefold()
        for suspect in self.case.suspects:
            if suspect.name.casefold() == wanted:
                return suspect
        partial = [s for s in self.case.suspects if wanted in s.name.casefold().split()]
        return partial[0] if len(partial) == 1 else None

    def _unknown_suspect(self, query: str) -> str:
        return f"There is no suspect called {query!r}. Suspects: {', '.join(s.name for s in self.case.suspects)}."


def _text(text: str) -> ToolOutput:
    return ToolOutput(blocks=[TextBlock(text=text)])


if __name__ == "__main__":
    Server([WhoDunIt]).run(host="127.0.0.1", port=int(sys.argv[1]))
