// The built-in training text: a short original story, so that `autoshard
// train` runs with no download. A byte-level model learns its spelling and
// rhythm within a few hundred steps.
#include <string>

#include "autoshard/io/token_data.h"

namespace autoshard {

const std::string& builtin_corpus() {
  static const std::string text = R"(The Keeper of the Northern Light

On the last rock before the open sea there stood a lighthouse, and in the lighthouse lived a keeper named Ada. Every evening she climbed the hundred and twelve steps to the lamp room, trimmed the wick, wound the clockwork, and watched the great lens begin to turn. Every morning she climbed down again, wrote the weather in her book, and slept until the gulls woke her.

The sea was never the same twice. On calm days it lay flat and grey like a sheet of tin, and the fishing boats went out and came back with their nets full. On wild days it threw itself against the rock, and the spray reached the windows of the kitchen, and Ada kept the kettle on and the lamp bright and did not sleep at all.

One winter a storm came that lasted seven days. The wind broke the shutters on the east side. The rain found its way under the door. The clockwork that turned the lens began to slow, because the cold had thickened the oil, and Ada had to turn the lens by hand for three nights, counting the seconds so that every flash came when the ships expected it.

On the fourth night she saw a light that was not hers. It was low on the water, and it moved. She watched it rise and fall with the waves, and she understood that it was a boat, small and far from harbour, and that the people on it were looking for her light to find their way home.

So she kept turning. Her arms ached and her hands were cold, but she kept turning, one flash every ten seconds, the same rhythm her light had kept for forty years. The small light on the water came closer. It passed the black reef to the south, where many boats had been lost, and it passed the sand bar to the west, and at last it came into the shelter of the harbour wall and stopped.

In the morning the storm was over. The sea was calm and grey like a sheet of tin. A fisherman and his daughter climbed up the path to the lighthouse with a basket of bread and a jar of honey. They had been caught by the storm on the far side of the island, they said, and they had followed the light all night. Every ten seconds, the daughter said, they had counted, and every ten seconds the light had come.

Ada gave them tea. She showed the daughter the lamp room, the wick and the clockwork and the great lens, and she showed her how to warm the oil so that the clockwork would turn even in the coldest winter. The daughter asked if she could come back, and Ada said yes.

She came back the next week, and the week after that. She learned to trim the wick and wind the clockwork. She learned to read the clouds and write the weather in the book. She learned that the sea is never the same twice, and that a light must be the same every night.

Years later, when Ada was old and the steps had grown too many for her, the daughter became the keeper of the northern light. Every evening she climbed the hundred and twelve steps to the lamp room, trimmed the wick, wound the clockwork, and watched the great lens begin to turn. And every ten seconds, all night long, the light came.

What the Keeper Wrote

Monday. Wind from the west, light. Sea calm. Three boats out, three boats home.
Tuesday. Wind from the west, fresh. Sea moderate. Four boats out, four boats home.
Wednesday. Wind from the north, strong. Sea rough. Two boats out, two boats home.
Thursday. Wind from the north, gale. Sea very rough. No boats out.
Friday. Wind from the north, gale. Sea very rough. No boats out. Oil thick with cold.
Saturday. Wind from the east, strong. Sea rough. One boat out, one boat home.
Sunday. Wind from the south, light. Sea calm. Five boats out, five boats home.

A light must be the same every night, because the people who need it most are the ones who cannot see anything else. A keeper does not choose the weather. A keeper chooses to climb the steps.
)";
  return text;
}

}  // namespace autoshard
